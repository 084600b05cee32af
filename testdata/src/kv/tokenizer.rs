//! BERT's uncased WordPiece tokenizer, as `BertTokenizer(do_lower_case=True)`
//! runs it: clean the text, split it on whitespace and punctuation, lower-case
//! and strip accents, then cut every word greedily into the longest pieces
//! the vocabulary holds (`##` marks a piece that continues a word).
//!
//! Q: why no `tokenizers` crate? A: the KV data only needs ids that the
//! model was trained on, for English text; a hundred lines do that without
//! pulling a tokenizer framework (and its regex and unicode tables) into the
//! library. The differences from the Python tokenizer are in Unicode corner
//! cases: punctuation is ASCII punctuation plus the General Punctuation and
//! CJK Symbols blocks (Python asks the Unicode category), and accents are
//! stripped from Latin-1 and Latin Extended-A letters only (Python decomposes
//! with NFD). English text, the model card included, tokenizes the same.
#![forbid(unsafe_code)]

use std::collections::HashMap;

use ibp::{Error, Result};

/// Words longer than this (in characters) become `[UNK]`, as in BERT.
const MAX_WORD_CHARS: usize = 100;

/// A WordPiece vocabulary and the ids of its special tokens.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    ids: HashMap<String, u32>,
    tokens: Vec<String>,
    unk: u32,
    cls: u32,
    sep: u32,
}

impl Tokenizer {
    /// A tokenizer for a `vocab.txt`: one token a line, the id being the
    /// line number from 0. It must hold `[UNK]`, `[CLS]` and `[SEP]`
    /// ([`ibp::ErrorKind::Corrupt`] otherwise).
    pub fn from_vocab(text: &str) -> Result<Self> {
        let mut ids = HashMap::new();
        let mut tokens = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let id = u32::try_from(i)
                .map_err(|_| Error::corrupt("the vocabulary has more than 2^32 lines"))?;
            let token = line.trim_end_matches('\r').to_string();
            // The first occurrence wins, as in BERT's load_vocab.
            ids.entry(token.clone()).or_insert(id);
            tokens.push(token);
        }
        let special = |t: &str| {
            ids.get(t).copied().ok_or_else(|| {
                Error::corrupt(format!(
                    "the vocabulary has no {t} token; is it a BERT vocab.txt?"
                ))
            })
        };
        Ok(Self {
            unk: special("[UNK]")?,
            cls: special("[CLS]")?,
            sep: special("[SEP]")?,
            ids,
            tokens,
        })
    }

    /// The id of `[CLS]`, which starts every window.
    pub fn cls(&self) -> u32 {
        self.cls
    }

    /// The id of `[SEP]`, which ends every window.
    pub fn sep(&self) -> u32 {
        self.sep
    }

    /// The id of `[UNK]`, for words the vocabulary cannot spell.
    pub fn unk(&self) -> u32 {
        self.unk
    }

    /// Number of tokens in the vocabulary (lines of `vocab.txt`).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the vocabulary is empty (never, for one that loaded).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The id of one token, if the vocabulary has it.
    pub fn id(&self, token: &str) -> Option<u32> {
        self.ids.get(token).copied()
    }

    /// The token of one id, if the vocabulary has it.
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// The WordPiece ids of `text`, without `[CLS]` and `[SEP]`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        for word in basic_tokens(text) {
            self.word_pieces(&word, &mut out);
        }
        out
    }

    /// Greedy longest-match-first: the whole word becomes one `[UNK]` when
    /// some part of it matches no piece.
    fn word_pieces(&self, word: &str, out: &mut Vec<u32>) {
        if word.chars().count() > MAX_WORD_CHARS {
            out.push(self.unk);
            return;
        }
        let start_len = out.len();
        let mut start = 0;
        let mut piece = String::new();
        while start < word.len() {
            let mut end = word.len();
            let mut found = None;
            while end > start {
                piece.clear();
                if start > 0 {
                    piece.push_str("##");
                }
                piece.push_str(&word[start..end]);
                if let Some(&id) = self.ids.get(piece.as_str()) {
                    found = Some(id);
                    break;
                }
                // Back off by one character, not one byte.
                end = word[..end]
                    .char_indices()
                    .next_back()
                    .map_or(start, |c| c.0);
            }
            match found {
                Some(id) => out.push(id),
                None => {
                    out.truncate(start_len);
                    out.push(self.unk);
                    return;
                }
            }
            start = end;
        }
    }
}

/// BERT's basic tokenization: words and single punctuation characters,
/// lower-cased and without accents.
pub(crate) fn basic_tokens(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let flush = |cur: &mut String, words: &mut Vec<String>| {
        if !cur.is_empty() {
            words.push(std::mem::take(cur));
        }
    };
    for c in text.chars() {
        // Cleaning: NUL, the replacement character and control characters
        // go; every kind of whitespace separates.
        if c == '\0' || c == '\u{fffd}' || (c.is_control() && !c.is_whitespace()) {
            continue;
        }
        if c.is_whitespace() {
            flush(&mut cur, &mut words);
        } else if is_punctuation(c) || is_cjk(c) {
            // Q: why CJK here? A: BERT puts spaces around every CJK
            // ideograph, so each is a word of its own, like punctuation.
            flush(&mut cur, &mut words);
            words.push(fold(c).collect());
        } else {
            cur.extend(fold(c));
        }
    }
    flush(&mut cur, &mut words);
    words
}

/// Lower-case, then drop the accent (NFD followed by removing combining
/// marks, for the Latin letters that have a precomposed form here).
fn fold(c: char) -> impl Iterator<Item = char> {
    c.to_lowercase()
        .map(strip_accent)
        .filter(|c| !('\u{300}'..='\u{36f}').contains(c))
}

fn strip_accent(c: char) -> char {
    const LATIN1: &str = "aaaaaa.ceeeeiiii.nooooo..uuuuy.y";
    match c {
        // Latin-1 Supplement, lower case (after to_lowercase): à..ÿ, with
        // æ, ð, ÷, ø, þ (no decomposition) marked '.'.
        '\u{e0}'..='\u{ff}' => match LATIN1.as_bytes()[c as usize - 0xe0] {
            b'.' => c,
            b => b as char,
        },
        // Latin Extended-A: pairs of (upper, lower) of one base letter.
        'ā' | 'ă' | 'ą' => 'a',
        'ć' | 'ĉ' | 'ċ' | 'č' => 'c',
        'ď' => 'd',
        'ē' | 'ĕ' | 'ė' | 'ę' | 'ě' => 'e',
        'ĝ' | 'ğ' | 'ġ' | 'ģ' => 'g',
        'ĥ' => 'h',
        'ĩ' | 'ī' | 'ĭ' | 'į' => 'i',
        'ĵ' => 'j',
        'ķ' => 'k',
        'ĺ' | 'ļ' | 'ľ' => 'l',
        'ń' | 'ņ' | 'ň' => 'n',
        'ō' | 'ŏ' | 'ő' => 'o',
        'ŕ' | 'ŗ' | 'ř' => 'r',
        'ś' | 'ŝ' | 'ş' | 'š' => 's',
        'ţ' | 'ť' => 't',
        'ũ' | 'ū' | 'ŭ' | 'ů' | 'ű' | 'ų' => 'u',
        'ŵ' => 'w',
        'ŷ' => 'y',
        'ź' | 'ż' | 'ž' => 'z',
        c => c,
    }
}

/// BERT counts every non-alphanumeric ASCII character as punctuation (`$`,
/// `^`, `` ` `` included), and Unicode's P categories elsewhere; here the
/// General Punctuation, Latin-1 punctuation and CJK Symbols blocks stand for
/// the latter.
fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(
            c,
            '\u{a1}' | '\u{a7}' | '\u{ab}' | '\u{b6}' | '\u{b7}' | '\u{bb}' | '\u{bf}'
        )
        || ('\u{2010}'..='\u{2027}').contains(&c)
        || ('\u{2030}'..='\u{205e}').contains(&c)
        || ('\u{3001}'..='\u{3003}').contains(&c)
        || ('\u{3008}'..='\u{3011}').contains(&c)
}

/// The CJK ideograph blocks BERT's `_is_chinese_char` lists.
fn is_cjk(c: char) -> bool {
    let u = c as u32;
    (0x4e00..=0x9fff).contains(&u)
        || (0x3400..=0x4dbf).contains(&u)
        || (0x20000..=0x2a6df).contains(&u)
        || (0x2a700..=0x2b73f).contains(&u)
        || (0x2b740..=0x2b81f).contains(&u)
        || (0x2b820..=0x2ceaf).contains(&u)
        || (0xf900..=0xfaff).contains(&u)
        || (0x2f800..=0x2fa1f).contains(&u)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Tokenizer {
        let vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nun\n##aff\n##able\nthe\ncafe\n,\n!\nrun\n##ning\n##n\nhello";
        Tokenizer::from_vocab(vocab).unwrap()
    }

    #[test]
    fn basic_splits_punctuation_lowercases_and_strips_accents() {
        assert_eq!(
            basic_tokens("  Hello,\tWORLD!  Café naïve\u{0}x"),
            ["hello", ",", "world", "!", "cafe", "naivex"]
        );
        assert_eq!(basic_tokens("a$b—c"), ["a", "$", "b", "—", "c"]);
        assert_eq!(basic_tokens("中文"), ["中", "文"]);
        assert!(basic_tokens(" \n\r\t ").is_empty());
    }

    #[test]
    fn wordpiece_is_greedy_longest_first() {
        let t = tiny();
        // The example of BERT's docstring: "unaffable" -> un ##aff ##able.
        assert_eq!(t.encode("unaffable"), [4, 5, 6]);
        // "running": the longest first piece is "run", then "##ning" before
        // "##n".
        assert_eq!(t.encode("Running, the CAFÉ!"), [11, 12, 9, 7, 8, 10]);
        // One piece that cannot be spelled makes the whole word [UNK].
        assert_eq!(t.encode("unaffablex hello"), [t.unk(), 14]);
        assert_eq!(t.encode(&"a".repeat(101)), [t.unk()]);
        assert_eq!((t.cls(), t.sep(), t.len()), (2, 3, 15));
    }

    #[test]
    fn multibyte_words_back_off_by_characters() {
        let t = Tokenizer::from_vocab("[UNK]\n[CLS]\n[SEP]\né\n##é\nø").unwrap();
        // 'ø' is not decomposed; "øø" is ø ##ø, and ##ø is missing.
        assert_eq!(t.encode("ø"), [5]);
        assert_eq!(t.encode("øø"), [0]);
    }

    #[test]
    fn vocab_without_special_tokens_is_an_error() {
        let e = Tokenizer::from_vocab("a\nb\n").unwrap_err();
        assert_eq!(e.kind(), ibp::ErrorKind::Corrupt);
    }
}
