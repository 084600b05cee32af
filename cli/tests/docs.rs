//! The documents held to the code, as FORMAT.md and DEVICE-API.md are by
//! their own tests:
//!
//! - the README stays a front page (at most [`README_MAX_LINES`] lines);
//! - every relative link in README.md, CHANGELOG.md and docs/*.md (not the
//!   archive, which is history) names a file that exists, and every
//!   `#anchor` into a Markdown file names one of its headings;
//! - docs/CLI.md has a section for every subcommand of `ibp --help`, which
//!   names every long option of that subcommand's `--help`; and every
//!   `--option` the page gives a subcommand exists in its `--help`;
//! - every results file docs/BENCHMARKS.md cites exists.
//!
//! Fast and without a GPU: it reads files and runs `ibp … --help`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The README is the crate's front page on GitHub: what, why, how to try
/// it, one table, links. Everything longer has its own page in docs/.
const README_MAX_LINES: usize = 200;

/// The repository (this package is its `cli/` folder).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    let p = root().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

#[test]
fn the_readme_is_at_most_200_lines() {
    let n = read("README.md").lines().count();
    assert!(
        n <= README_MAX_LINES,
        "README.md has {n} lines, more than {README_MAX_LINES}: move the detail to a page in docs/ and link it"
    );
}

/// README.md, CHANGELOG.md and every docs/*.md (docs/archive/ is history and
/// keeps the links it was written with).
fn checked_documents() -> Vec<String> {
    let mut docs = vec!["README.md".to_string(), "CHANGELOG.md".to_string()];
    let mut pages: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("reading docs/")
        .map(|e| {
            e.expect("a docs/ entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    pages.sort();
    docs.extend(pages);
    docs
}

/// The lines of a Markdown text outside fenced code blocks, numbered from 1.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// `line` without its code spans (`…`), which may hold text that only looks
/// like a link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of inline links and images, `[text](target)`, outside code.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            if !target.is_empty() {
                out.push((n, target.to_string()));
            }
            rest = &rest[end..];
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, letters, digits, `-` and `_`
/// kept, spaces made `-`, everything else dropped; a repeated anchor gets
/// `-1`, `-2`, … in order.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let t = line.trim_start_matches('#');
        if t.len() == line.len() || !t.starts_with(' ') || line.len() - t.len() > 6 {
            continue;
        }
        let slug: String = t
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    for doc in checked_documents() {
        let text = read(&doc);
        let dir = Path::new(&doc)
            .parent()
            .unwrap_or(Path::new(""))
            .to_path_buf();
        for (line, target) in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue; // no network in tests
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                PathBuf::from(&doc)
            } else {
                dir.join(path)
            };
            let abs = root().join(&file);
            if !abs.exists() {
                broken.push(format!(
                    "{doc}:{line}: {target} ({} does not exist)",
                    file.display()
                ));
                continue;
            }
            if let Some(a) = anchor
                && abs.extension().is_some_and(|e| e == "md")
            {
                let headings = anchors(&std::fs::read_to_string(&abs).expect("a linked page"));
                if !headings.contains(a) {
                    broken.push(format!(
                        "{doc}:{line}: {target} (no heading of {} has the anchor #{a})",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// `ibp ARGS…`'s standard output, which must succeed.
fn ibp(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ibp"))
        .args(args)
        .output()
        .expect("running ibp");
    assert!(
        out.status.success(),
        "ibp {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

/// The subcommands `ibp --help` lists (its "Commands:" section), less `help`.
fn subcommands() -> Vec<String> {
    let help = ibp(&["--help"]);
    let mut out = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line.trim_end() == "Commands:" {
            inside = true;
            continue;
        }
        if inside {
            if !line.starts_with("  ") {
                break;
            }
            let name = line.split_whitespace().next().unwrap_or("");
            if !name.is_empty() && name != "help" {
                out.push(name.to_string());
            }
        }
    }
    assert!(
        !out.is_empty(),
        "no subcommands found in ibp --help:\n{help}"
    );
    out
}

/// The long options `ibp SUB --help` shows (its option lines: `--name`, or
/// `-x, --name`), less `--help` and `--version`.
fn long_options(sub: &str) -> BTreeSet<String> {
    let help = ibp(&[sub, "--help"]);
    help.lines()
        .filter_map(|line| {
            let t = line.trim_start();
            let t = match t.as_bytes() {
                [b'-', c, b',', b' ', ..] if *c != b'-' => &t[4..],
                _ => t,
            };
            let name = t.strip_prefix("--")?;
            let name: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (!name.is_empty() && name != "help" && name != "version").then_some(name)
        })
        .collect()
}

/// The `--options` a text names, each as written (without the dashes).
fn named_options(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(j) = text[i..].find("--") {
        let at = i + j;
        let before_ok = at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'-');
        let name: String = text[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if before_ok && name.starts_with(|c: char| c.is_ascii_lowercase()) {
            out.push(name.trim_end_matches('-').to_string());
        }
        i = at + 2;
    }
    out
}

/// The subcommand a line of a console block runs, `ibp SUB …`, if any.
fn runs(line: &str, subs: &[String]) -> Option<String> {
    line.match_indices("ibp ").find_map(|(i, _)| {
        let before_ok = i == 0 || !line.as_bytes()[i - 1].is_ascii_alphanumeric();
        let word = line[i + 4..].split_whitespace().next()?;
        (before_ok && subs.iter().any(|s| s == word)).then(|| word.to_string())
    })
}

/// docs/CLI.md split by subcommand: the text of each section whose `## `
/// heading names `` `ibp SUB` `` (up to the next `## ` heading), and, for
/// every subcommand, the options given to it, with where: in its section's
/// prose, and on any console line that runs `ibp SUB`.
struct CliPage {
    sections: BTreeMap<String, String>,
    given: BTreeMap<String, Vec<(usize, String)>>,
}

fn cli_page(subs: &[String]) -> CliPage {
    let text = read("docs/CLI.md");
    let mut sections: BTreeMap<String, String> = BTreeMap::new();
    let mut given: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("## ") {
            current = subs
                .iter()
                .find(|s| line.contains(&format!("`ibp {s}`")))
                .cloned();
        }
        if let Some(s) = &current {
            let body = sections.entry(s.clone()).or_default();
            body.push_str(line);
            body.push('\n');
        }
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let owner = if fenced {
            runs(line, subs)
        } else {
            runs(line, subs).or_else(|| current.clone())
        };
        if let Some(s) = owner {
            for o in named_options(line) {
                given.entry(s.clone()).or_default().push((i + 1, o));
            }
        }
    }
    CliPage { sections, given }
}

#[test]
fn cli_md_documents_every_subcommand_and_option_of_the_binary() {
    let subs = subcommands();
    let page = cli_page(&subs);
    let mut missing = Vec::new();
    for sub in &subs {
        let Some(section) = page.sections.get(sub) else {
            missing.push(format!(
                "no section `## \\`ibp {sub}\\`` for the subcommand {sub}"
            ));
            continue;
        };
        let named: BTreeSet<String> = named_options(section).into_iter().collect();
        for opt in long_options(sub) {
            if !named.contains(&opt) {
                missing.push(format!(
                    "`ibp {sub} --{opt}` (in its --help) is not named in docs/CLI.md's `ibp {sub}` section"
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/CLI.md is behind the binary:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_option_cli_md_gives_a_subcommand_exists() {
    let subs = subcommands();
    let page = cli_page(&subs);
    let mut unknown = Vec::new();
    for (sub, uses) in &page.given {
        let known = long_options(sub);
        for (line, opt) in uses {
            if opt != "help" && opt != "version" && !known.contains(opt) {
                unknown.push(format!(
                    "docs/CLI.md:{line}: `--{opt}` given to `ibp {sub}`, whose --help has no such option"
                ));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "docs/CLI.md names options the binary does not have:\n{}",
        unknown.join("\n")
    );
}

/// The code spans of a line (the text between backticks).
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

#[test]
fn every_option_the_other_documents_give_ibp_exists() {
    // README.md, BENCHMARKS.md, GPU.md, …: console lines that run `ibp SUB`,
    // and code spans that start with `ibp SUB`. (docs/CLI.md has its own
    // checks above.)
    let subs = subcommands();
    let mut known: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut unknown = Vec::new();
    for doc in checked_documents() {
        if doc == "docs/CLI.md" {
            continue;
        }
        let text = read(&doc);
        let mut fenced = false;
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            let mut uses: Vec<(String, String)> = Vec::new();
            if fenced {
                if let Some(sub) = runs(line, &subs) {
                    uses.extend(named_options(line).into_iter().map(|o| (sub.clone(), o)));
                }
            } else {
                for span in code_spans(line) {
                    if let Some(sub) = runs(span, &subs).filter(|_| span.starts_with("ibp ")) {
                        uses.extend(named_options(span).into_iter().map(|o| (sub.clone(), o)));
                    }
                }
            }
            for (sub, opt) in uses {
                let opts = known
                    .entry(sub.clone())
                    .or_insert_with(|| long_options(&sub));
                if opt != "help" && opt != "version" && !opts.contains(&opt) {
                    unknown.push(format!(
                        "{doc}:{}: `ibp {sub} --{opt}`: no such option",
                        i + 1
                    ));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "documents name options the binary does not have:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn every_results_file_benchmarks_md_cites_exists() {
    let text = read("docs/BENCHMARKS.md");
    let mut cited = BTreeSet::new();
    for (i, _) in text.match_indices("results/") {
        let name: String = text[i + "results/".len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
            .collect();
        let name = name.trim_end_matches('.');
        // `results/<gpu>.md` (a pattern) and `results/` (the folder) name no file.
        if !name.is_empty() {
            cited.insert(name.to_string());
        }
    }
    assert!(
        cited.len() >= 5,
        "BENCHMARKS.md cites too few results files: {cited:?}"
    );
    let missing: Vec<_> = cited
        .iter()
        .filter(|n| !root().join("docs/results").join(n).is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "BENCHMARKS.md cites results files that do not exist: {missing:?}"
    );
}

#[test]
fn the_link_and_option_parsers_read_what_they_should() {
    // The helpers above decide what the checks see; a parser that found
    // nothing would make every check pass.
    let md = "# A `b` c\n## A b c\n[x](y.md#a-b-c) `[n](no.md)` ![i](p.svg)\n```\n[z](w.md)\n```\n";
    let t: Vec<_> = link_targets(md).into_iter().map(|(_, t)| t).collect();
    assert_eq!(t, ["y.md#a-b-c", "p.svg"]);
    let a = anchors(md);
    assert!(a.contains("a-b-c") && a.contains("a-b-c-1"), "{a:?}");
    assert_eq!(
        named_options("`--dtype DTYPE`, `--shape`; a-b --c --x-y|--z x--y"),
        ["dtype", "shape", "c", "x-y", "z"]
    );
    let subs = ["compress".to_string()];
    assert_eq!(
        runs("$ curl URL | ibp compress - -o -", &subs).as_deref(),
        Some("compress")
    );
    assert_eq!(
        runs("$ cargo install --features cli  # the ibp command", &subs),
        None
    );
}

#[test]
fn every_test_guarantees_md_names_exists() {
    // GUARANTEES.md promises only what a named test checks: every code span
    // that looks like a test (`snake_case`, optionally `file.rs::name`) must
    // be a test function in the library's tests/ or the command line's
    // cli/tests/ (a test file, or a module of a test binary kept in a folder
    // with its main.rs).
    let mut sources = String::new();
    let dirs = ["tests", "cli/tests"].map(|d| std::fs::read_dir(root().join(d)).unwrap());
    for e in dirs.into_iter().flatten() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            sources.push_str(&std::fs::read_to_string(&p).unwrap());
        } else if p.join("main.rs").is_file() {
            for m in std::fs::read_dir(&p).unwrap() {
                let m = m.unwrap().path();
                if m.extension().is_some_and(|x| x == "rs") {
                    sources.push_str(&std::fs::read_to_string(&m).unwrap());
                }
            }
        }
    }
    let text = read("docs/GUARANTEES.md");
    let mut named = 0;
    let mut missing = Vec::new();
    for line in text.lines() {
        for span in code_spans(line) {
            let name = span.rsplit("::").next().unwrap_or(span);
            let looks_like_a_test = name.contains('_')
                && name.len() > 12
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !looks_like_a_test {
                continue;
            }
            named += 1;
            if !sources.contains(&format!("fn {name}(")) {
                missing.push(name.to_string());
            }
        }
    }
    assert!(named >= 20, "GUARANTEES.md names only {named} tests");
    assert!(
        missing.is_empty(),
        "GUARANTEES.md names tests that do not exist: {missing:?}"
    );
}
