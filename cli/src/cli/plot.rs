//! The command line's one way to draw: a [`Chart`] (lines, dashed lines,
//! horizontal ceilings and labelled points on linear axes) rendered to SVG by
//! plotters. `ibp bench`, `ibp plot` and `ibp analyze --plot` (candidates and
//! `--clusters`) describe what to draw and call [`svg`] or [`write`].
//!
//! Q: why does the text come out right without font libraries?
//! A: plotters is built with its SVG backend only (no `ttf`): text goes into
//! the file as `<text>` and the viewer draws it; plotters needs only an
//! estimate of its width to lay out the axes, which it computes itself.

use std::path::Path;

use ibp::{Error, ErrorKind, Result};
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One line of a chart.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// The legend's text.
    pub name: String,
    /// Points in drawing order.
    pub points: Vec<(f64, f64)>,
    /// Index into the palette; series with the same colour belong together
    /// (e.g. a measured line and its ideal).
    pub color: usize,
    /// Dashed (an ideal or a bound) instead of solid.
    pub dashed: bool,
    /// Draw a small dot on every point.
    pub dots: bool,
    /// Points to mark with a large dot (e.g. the chosen candidate).
    pub marked: Vec<(f64, f64)>,
}

/// A horizontal line across the chart (a ceiling), with its legend text.
#[derive(Debug, Clone)]
pub struct HLine {
    pub name: String,
    pub y: f64,
}

/// A single point drawn with its label beside it.
#[derive(Debug, Clone)]
pub struct Labelled {
    pub label: String,
    pub x: f64,
    pub y: f64,
}

/// A bar from `x0` to `x1`, from 0 up to `y`, labelled above when it is
/// wide enough.
#[derive(Debug, Clone)]
pub struct Bar {
    pub label: String,
    pub x0: f64,
    pub x1: f64,
    pub y: f64,
}

/// What to draw in one panel.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Axis ranges; `None` fits the data (the y axis always includes 0).
    pub x_range: Option<(f64, f64)>,
    pub y_range: Option<(f64, f64)>,
    /// Tick label text for a value on the x or y axis.
    pub x_format: fn(f64) -> String,
    pub y_format: fn(f64) -> String,
    pub series: Vec<Series>,
    pub hlines: Vec<HLine>,
    pub labelled: Vec<Labelled>,
    /// Legend label for the labelled points (none: no legend entry).
    pub labelled_name: Option<String>,
    /// Legend in the lower right corner instead of the upper left.
    pub legend_lower_right: bool,
    /// Bars, drawn first (under the lines).
    pub bars: Vec<Bar>,
}

impl Chart {
    /// An empty chart with plain number ticks.
    pub fn new(title: impl Into<String>, x: impl Into<String>, y: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            x_label: x.into(),
            y_label: y.into(),
            x_range: None,
            y_range: None,
            x_format: number,
            y_format: number,
            series: Vec::new(),
            hlines: Vec::new(),
            labelled: Vec::new(),
            labelled_name: None,
            legend_lower_right: false,
            bars: Vec::new(),
        }
    }

    fn xs(&self) -> impl Iterator<Item = f64> + '_ {
        let s = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0));
        s.chain(self.labelled.iter().map(|p| p.x))
            .chain(self.bars.iter().flat_map(|b| [b.x0, b.x1]))
    }

    fn ys(&self) -> impl Iterator<Item = f64> + '_ {
        let s = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1));
        s.chain(self.labelled.iter().map(|p| p.y))
            .chain(self.hlines.iter().map(|h| h.y))
            .chain(self.bars.iter().map(|b| b.y))
    }
}

/// A number with as few digits as it needs (ticks).
pub fn number(v: f64) -> String {
    if v == v.round() {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').to_string()
    }
}

/// A percentage tick: 25 → "25%".
pub fn percent(v: f64) -> String {
    format!("{}%", number(v))
}

/// Colours of the series, by [`Series::color`].
const PALETTE: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x17, 0xbe, 0xcf),
];
/// Ceilings are grey, labelled points black.
const CEILINGS: [RGBColor; 3] = [
    RGBColor(0x55, 0x55, 0x55),
    RGBColor(0x99, 0x99, 0x99),
    RGBColor(0x77, 0x77, 0x77),
];

/// Width of the SVG, and the height of one panel.
pub const WIDTH: u32 = 900;
pub const PANEL_HEIGHT: u32 = 520;

/// The charts as one SVG, stacked top to bottom.
pub fn svg(charts: &[Chart]) -> Result<String> {
    let mut out = String::new();
    let h = PANEL_HEIGHT * charts.len().max(1) as u32;
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, h)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let panels = root.split_evenly((charts.len().max(1), 1));
        for (c, area) in charts.iter().zip(&panels) {
            draw(c, area)?;
        }
        root.present().map_err(draw_error)?;
    }
    Ok(out)
}

/// [`svg`] written to `path`.
pub fn write(path: &Path, charts: &[Chart]) -> Result<()> {
    std::fs::write(path, svg(charts)?)
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

fn draw_error(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Io, format!("drawing the plot: {e}"))
}

/// (lo, hi) of `v`, padded by 5% of the span, or `fallback` when empty.
fn span(v: impl Iterator<Item = f64>, fallback: (f64, f64)) -> (f64, f64) {
    // Q: why drop huge values? A: an axis to 1e308 has no finite span
    // for its ticks; no chart of ibp's has a value past 1e15.
    let (lo, hi) = v
        .filter(|x| x.is_finite() && x.abs() <= 1e15)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| {
            (l.min(x), h.max(x))
        });
    if !lo.is_finite() {
        return fallback;
    }
    let pad = ((hi - lo) * 0.05).max(1e-9);
    if hi - lo < 1e-9 {
        return (lo - 1.0, hi + 1.0);
    }
    (lo - pad, hi + pad)
}

/// A panel's chart, on linear axes, as plotters draws it.
type Panel<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

fn draw(c: &Chart, area: &DrawingArea<SVGBackend<'_>, Shift>) -> Result<()> {
    let (x0, x1) = c.x_range.unwrap_or_else(|| span(c.xs(), (0.0, 1.0)));
    let (y0, y1) = c.y_range.unwrap_or_else(|| {
        let (lo, hi) = span(c.ys(), (0.0, 1.0));
        (lo.min(0.0), hi.max(lo.min(0.0) + 1.0))
    });
    let mut chart = ChartBuilder::on(area)
        .caption(&c.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc(&c.x_label)
        .y_desc(&c.y_label)
        .x_label_formatter(&|v| (c.x_format)(*v))
        .y_label_formatter(&|v| (c.y_format)(*v))
        .light_line_style(RGBColor(0xf0, 0xf0, 0xf0))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(draw_error)?;
    if !c.bars.is_empty() {
        draw_bars(&mut chart, &c.bars, x1 - x0)?;
    }
    for (i, h) in c.hlines.iter().enumerate() {
        let color = CEILINGS[i % CEILINGS.len()];
        let style = ShapeStyle::from(color).stroke_width(1);
        chart
            .draw_series(DashedLineSeries::new([(x0, h.y), (x1, h.y)], 3, 3, style))
            .map_err(draw_error)?
            .label(&h.name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
    }
    for s in &c.series {
        draw_line(&mut chart, s)?;
    }
    if !c.labelled.is_empty() {
        draw_labelled(&mut chart, c, (x0 + x1) / 2.0)?;
    }
    if !c.series.is_empty() || !c.hlines.is_empty() || c.labelled_name.is_some() {
        chart
            .configure_series_labels()
            .position(if c.legend_lower_right {
                SeriesLabelPosition::LowerRight
            } else {
                SeriesLabelPosition::UpperLeft
            })
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(0xcc, 0xcc, 0xcc))
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(draw_error)?;
    }
    Ok(())
}

/// The bars, filled and outlined, labelled when wide enough (`x_span`: the
/// x axis's span).
fn draw_bars(chart: &mut Panel<'_, '_>, bars: &[Bar], x_span: f64) -> Result<()> {
    let fill = PALETTE[0].mix(0.55);
    chart
        .draw_series(
            bars.iter()
                .map(|b| Rectangle::new([(b.x0, 0.0), (b.x1, b.y)], fill.filled())),
        )
        .map_err(draw_error)?;
    chart
        .draw_series(
            bars.iter()
                .map(|b| Rectangle::new([(b.x0, 0.0), (b.x1, b.y)], WHITE.stroke_width(1))),
        )
        .map_err(draw_error)?;
    // Labels only on bars of at least 4% of the width, so they do not
    // run into each other.
    let min_w = 0.04 * x_span;
    let style = TextStyle::from(("sans-serif", 11).into_font())
        .pos(Pos::new(HPos::Left, VPos::Center))
        .transform(FontTransform::Rotate270);
    chart
        .draw_series(
            bars.iter()
                .filter(|b| b.x1 - b.x0 >= min_w && !b.label.is_empty())
                .map(|b| {
                    Text::new(
                        b.label.clone(),
                        ((b.x0 + b.x1) / 2.0, b.y.max(0.0)),
                        style.clone(),
                    )
                }),
        )
        .map_err(draw_error)?;
    Ok(())
}

/// One series: its line (solid or dashed) with a legend entry, its dots
/// and its marked points.
fn draw_line(chart: &mut Panel<'_, '_>, s: &Series) -> Result<()> {
    let color = PALETTE[s.color % PALETTE.len()];
    let style = ShapeStyle::from(color).stroke_width(2);
    let pts = s.points.iter().copied();
    let anno = if s.dashed {
        chart.draw_series(DashedLineSeries::new(pts, 8, 5, style))
    } else {
        chart.draw_series(LineSeries::new(pts, style))
    }
    .map_err(draw_error)?;
    let dashed = s.dashed;
    anno.label(&s.name).legend(move |(x, y)| {
        let w = if dashed { 8 } else { 20 };
        PathElement::new([(x, y), (x + w, y)], style)
    });
    if s.dots {
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(draw_error)?;
    }
    chart
        .draw_series(s.marked.iter().map(|&p| Circle::new(p, 6, color.filled())))
        .map_err(draw_error)?;
    Ok(())
}

/// The labelled points (labels in the right half of `mid` end at their
/// point), with a legend entry when the chart names them.
fn draw_labelled(chart: &mut Panel<'_, '_>, c: &Chart, mid: f64) -> Result<()> {
    // Q: why the stagger? A: neighbouring points (two tables of similar
    // savings) would print their labels on top of each other; each label
    // sits one line higher than the previous one's, and labels in the
    // right half end at their point so that they stay inside the chart.
    let anno = chart
        .draw_series(c.labelled.iter().enumerate().map(|(i, p)| {
            let right = p.x > mid;
            let anchor = Pos::new(if right { HPos::Right } else { HPos::Left }, VPos::Bottom);
            let style = TextStyle::from(("sans-serif", 12).into_font()).pos(anchor);
            let dx = if right { 6 } else { -6 };
            EmptyElement::at((p.x, p.y))
                + Circle::new((0, 0), 4, BLACK.filled())
                + Text::new(p.label.clone(), (dx, -8 - 15 * (i as i32 % 3)), style)
        }))
        .map_err(draw_error)?;
    if let Some(name) = &c.labelled_name {
        anno.label(name)
            .legend(|(x, y)| Circle::new((x + 10, y), 4, BLACK.filled()));
    }
    Ok(())
}

/// The text of every `<text>` element of an SVG (for tests).
#[cfg(test)]
pub fn texts(svg: &str) -> Vec<&str> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| Some(t[t.find('>')? + 1..t.find("</text>")?].trim()))
        .collect()
}

/// How many lines and legend entries of `color` (`#RRGGBB`, upper case)
/// an SVG has (for tests).
#[cfg(test)]
pub fn lines_of(svg: &str, color: &str) -> usize {
    svg.matches(&format!(r#"stroke="{color}" stroke-width="2""#))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_series_ceilings_and_labels() {
        let mut c = Chart::new("t & <title>", "x", "y");
        c.series.push(Series {
            name: "solid".into(),
            points: vec![(0.0, 1.0), (1.0, 2.0)],
            dots: true,
            marked: vec![(1.0, 2.0)],
            ..Default::default()
        });
        c.series.push(Series {
            name: "dashed".into(),
            points: vec![(0.0, 2.0), (1.0, 3.0)],
            color: 1,
            dashed: true,
            ..Default::default()
        });
        c.hlines.push(HLine {
            name: "ceiling".into(),
            y: 1.5,
        });
        c.labelled.push(Labelled {
            label: "a point".into(),
            x: 0.5,
            y: 2.5,
        });
        let s = svg(&[c.clone(), c]).unwrap();
        assert!(
            s.starts_with("<svg") && s.trim_end().ends_with("</svg>"),
            "{s}"
        );
        let t = texts(&s);
        for name in [
            "t &amp; &lt;title&gt;",
            "solid",
            "dashed",
            "ceiling",
            "a point",
        ] {
            assert_eq!(t.iter().filter(|x| **x == name).count(), 2, "{name}: {t:?}");
        }
        // The solid line and its legend entry, in each panel.
        assert_eq!(lines_of(&s, "#1F77B4"), 4);
        assert_eq!(s.matches(r#"r="6""#).count(), 2);
        assert!(!s.contains("NaN") && !s.contains("inf"));
    }

    #[test]
    fn empty_and_flat_charts_draw() {
        let s = svg(&[Chart::new("empty", "x", "y")]).unwrap();
        assert!(texts(&s).contains(&"empty"));
        let mut c = Chart::new("flat", "x", "y");
        c.series.push(Series {
            name: "one".into(),
            points: vec![(3.0, 3.0)],
            ..Default::default()
        });
        let s = svg(&[c]).unwrap();
        assert!(!s.contains("NaN") && !s.contains("inf"));
        assert!(svg(&[]).unwrap().starts_with("<svg"));
    }

    #[test]
    fn tick_text() {
        assert_eq!(number(25.0), "25");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(percent(12.0), "12%");
    }
}
