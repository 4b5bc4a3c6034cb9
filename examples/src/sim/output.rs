//! Result tables, JSON and plots.

use std::path::Path;

use serde::Serialize;

use super::timeline::{self, Timeline};

/// One row of a result table: a label and named numbers.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// What this row is (a variant, a flow, a port).
    pub label: String,
    /// Column name -> value, in column order.
    pub values: Vec<(String, f64)>,
}

/// A requirement of the issue and whether the run met it.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// What is required.
    pub requirement: String,
    /// What was measured.
    pub measured: String,
    /// Met.
    pub pass: bool,
}

/// A table with optional checks, printable, serialisable and plottable.
#[derive(Clone, Debug, Serialize)]
pub struct ResultTable {
    /// Title.
    pub title: String,
    /// Rows.
    pub rows: Vec<Row>,
    /// Requirements checked.
    pub checks: Vec<Check>,
    /// Column plotted by `--plot`.
    pub plot_column: Option<String>,
    /// A reference line for the plot (e.g. the ideal).
    pub plot_reference: Option<f64>,
    /// Chart panels of `--plot` (when empty, one from `plot_column`).
    #[serde(skip)]
    pub panels: Vec<Panel>,
    /// Quantities over time ([`Timeline`]), in the JSON and drawn by `--plot` after the
    /// panels.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timelines: Vec<Timeline>,
}

impl ResultTable {
    /// An empty table.
    pub fn new(title: impl Into<String>) -> Self {
        ResultTable {
            title: title.into(),
            rows: Vec::new(),
            checks: Vec::new(),
            plot_column: None,
            plot_reference: None,
            panels: Vec::new(),
            timelines: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, label: impl Into<String>, values: &[(&str, f64)]) {
        self.rows.push(Row {
            label: label.into(),
            values: values.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        });
    }

    /// Adds a check.
    pub fn check(
        &mut self,
        requirement: impl Into<String>,
        measured: impl Into<String>,
        pass: bool,
    ) {
        self.checks.push(Check {
            requirement: requirement.into(),
            measured: measured.into(),
            pass,
        });
    }

    /// Whether every check passed.
    pub fn all_pass(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }

    /// The table as aligned text.
    pub fn render(&self) -> String {
        let mut cols: Vec<String> = Vec::new();
        for r in &self.rows {
            for (k, _) in &r.values {
                if !cols.contains(k) {
                    cols.push(k.clone());
                }
            }
        }
        let fmt = |v: f64| {
            if v.fract() == 0.0 && v.abs() < 1e15 {
                format!("{v:.0}")
            } else if v.abs() >= 100.0 {
                format!("{v:.1}")
            } else {
                format!("{v:.3}")
            }
        };
        let mut cells: Vec<Vec<String>> = vec![
            std::iter::once(String::new())
                .chain(cols.iter().cloned())
                .collect(),
        ];
        for r in &self.rows {
            let mut line = vec![r.label.clone()];
            for c in &cols {
                line.push(
                    r.values
                        .iter()
                        .find(|(k, _)| k == c)
                        .map_or(String::from("-"), |(_, v)| fmt(*v)),
                );
            }
            cells.push(line);
        }
        let widths: Vec<usize> = (0..=cols.len())
            .map(|i| cells.iter().map(|l| l[i].len()).max().unwrap_or(0))
            .collect();
        let mut out = format!("{}\n", self.title);
        for l in &cells {
            let line: Vec<String> = l
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if i == 0 {
                        format!("{c:<w$}", w = widths[i])
                    } else {
                        format!("{c:>w$}", w = widths[i])
                    }
                })
                .collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
        }
        for c in &self.checks {
            out.push_str(&format!(
                "[{}] {}: {}\n",
                if c.pass { "PASS" } else { "MISS" },
                c.requirement,
                c.measured
            ));
        }
        out
    }

    /// Adds a chart panel to `--plot`.
    pub fn panel(&mut self, p: Panel) {
        self.panels.push(p);
    }

    /// The panels `--plot` draws: the ones added, or one for the plot column (the first
    /// column when none is set) with the reference as its ideal; a panel whose bars differ
    /// by more than 10x is split into one panel per scale.
    pub fn plot_panels(&self) -> Vec<Panel> {
        let base: Vec<Panel> = if self.panels.is_empty() {
            let col = self.plot_column.clone().or_else(|| {
                self.rows
                    .first()
                    .and_then(|r| r.values.first().map(|(k, _)| k.clone()))
            });
            col.map(|c| {
                let mut p = Panel::new(&c, "");
                if let Some(r) = self.plot_reference {
                    p = p.ideal(r, "ideal");
                }
                p
            })
            .into_iter()
            .collect()
        } else {
            self.panels.clone()
        };
        let mut out = Vec::new();
        for p in base {
            let bars = p.bars(&self.rows);
            let groups = scale_groups(&bars);
            if groups.len() <= 1 {
                out.push(p);
                continue;
            }
            let m = groups.len();
            for (k, g) in groups.into_iter().enumerate() {
                let mut q = p.clone();
                let title = if p.title.is_empty() {
                    p.quantity.clone()
                } else {
                    p.title.clone()
                };
                q.title = format!("{title} ({} of {m}, one scale each)", k + 1);
                q.only = Some(g.iter().map(|&i| bars[i].label.clone()).collect());
                out.push(q);
            }
        }
        out
    }

    /// Draws the panels of [`plot_panels`](Self::plot_panels) as bar charts (SVG for
    /// `.svg`, PNG for `.png`): axis titles with units, scaled ticks, each bar's value, the
    /// ideal (solid) and PASS threshold (dashed) lines labelled, and a legend; then the
    /// timelines as line charts.
    ///
    /// Errors: a message when the extension is neither, the directory is missing, there is
    /// nothing to plot or drawing fails.
    pub fn plot(&self, path: &Path) -> Result<(), String> {
        check_plot_path(path)?;
        // Open the file here so an I/O error reads as one (plotters' PNG backend reports
        // it as a Debug dump of the image crate's error).
        std::fs::File::create(path).map_err(|e| e.to_string())?;
        let panels = self.plot_panels();
        let cells = panels.len() + self.timelines.len();
        if cells == 0 {
            return Err("nothing to plot".into());
        }
        let cols: u32 = if cells == 1 { 1 } else { 2 };
        let grid_rows = (cells as u32).div_ceil(cols);
        let width = if cols == 1 { 1000 } else { 1400 };
        let title_lines = wrap(&self.title, (width as usize - 40) / 9);
        let title_h = 16 + 22 * title_lines.len() as u32;
        let size = (width, title_h + grid_rows * PANEL_H);
        let svg = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
        let layout = Layout {
            title_lines: &title_lines,
            title_h,
            cols,
            grid_rows,
        };
        if svg {
            let root = plotters::prelude::SVGBackend::new(path, size);
            draw(root, self, &panels, &layout)
        } else {
            let root = plotters::prelude::BitMapBackend::new(path, size);
            draw(root, self, &panels, &layout)
        }
    }
}

/// Height of one panel, pixels.
const PANEL_H: u32 = 470;

/// What a chart's value axis shows; its display unit is scaled to the largest value
/// (Gb/s or Tb/s, us or ms, bytes, KiB or MiB, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Gb/s.
    Gbps,
    /// Microseconds.
    Us,
    /// Seconds.
    Seconds,
    /// Bytes (shown in KiB, MiB, GiB).
    Bytes,
    /// Per second (shown with k, M, G).
    PerS,
    /// Percent.
    Percent,
    /// A ratio (times).
    Ratio,
    /// A count (shown with k, M, G).
    Count,
}

impl Unit {
    /// The quantity and unit a column name implies: `_gbps`, `_us`, `_bytes`, `_per_s`,
    /// `_s` suffixes, `pct_` and `x_` prefixes, otherwise a count.
    pub fn of_column(col: &str) -> (String, Unit) {
        let (q, u) = if let Some(q) = col.strip_suffix("_gbps") {
            (q, Unit::Gbps)
        } else if let Some(q) = col.strip_suffix("_us") {
            (q, Unit::Us)
        } else if let Some(q) = col.strip_suffix("_bytes") {
            (q, Unit::Bytes)
        } else if let Some(q) = col.strip_suffix("_per_s") {
            (q, Unit::PerS)
        } else if let Some(q) = col.strip_suffix("_s") {
            (q, Unit::Seconds)
        } else if let Some(q) = col.strip_prefix("pct_") {
            (q, Unit::Percent)
        } else if let Some(q) = col.strip_prefix("x_") {
            (q, Unit::Ratio)
        } else {
            (col, Unit::Count)
        };
        (q.replace('_', " "), u)
    }

    /// Divisor and unit text for values up to `max`.
    pub fn scale(self, max: f64) -> (f64, &'static str) {
        let m = max.abs();
        match self {
            Unit::Gbps if m >= 1e3 => (1e3, "Tb/s"),
            Unit::Gbps => (1.0, "Gb/s"),
            Unit::Us if m >= 1e6 => (1e6, "s"),
            Unit::Us if m >= 1e3 => (1e3, "ms"),
            Unit::Us => (1.0, "us"),
            Unit::Seconds if m < 1e-3 => (1e-6, "us"),
            Unit::Seconds if m < 1.0 => (1e-3, "ms"),
            Unit::Seconds => (1.0, "s"),
            Unit::Bytes if m >= f64::from(1u32 << 30) => (f64::from(1u32 << 30), "GiB"),
            Unit::Bytes if m >= f64::from(1u32 << 20) => (f64::from(1u32 << 20), "MiB"),
            Unit::Bytes if m >= 1024.0 => (1024.0, "KiB"),
            Unit::Bytes => (1.0, "bytes"),
            Unit::PerS if m >= 1e9 => (1e9, "G/s"),
            Unit::PerS if m >= 1e6 => (1e6, "M/s"),
            Unit::PerS if m >= 1e3 => (1e3, "k/s"),
            Unit::PerS => (1.0, "/s"),
            Unit::Percent => (1.0, "%"),
            Unit::Ratio => (1.0, "x"),
            Unit::Count if m >= 1e9 => (1e9, "G"),
            Unit::Count if m >= 1e6 => (1e6, "M"),
            Unit::Count if m >= 1e4 => (1e3, "k"),
            Unit::Count => (1.0, ""),
        }
    }
}

/// The value of a reference line: one for all bars, or per bar from a column times a factor.
#[derive(Clone, Debug)]
pub enum LineValue {
    /// The same value over every bar.
    Const(f64),
    /// `factor x` the row's `column`, drawn over that row's bar.
    PerRow(String, f64),
}

/// A reference line of a panel.
#[derive(Clone, Debug)]
pub struct RefLine {
    /// Where.
    pub value: LineValue,
    /// Legend text (the value in the panel's unit is appended for a constant line).
    pub label: String,
    /// A PASS threshold (dashed, red) rather than an ideal or a mark (solid).
    pub threshold: bool,
    /// The short name written at the line's right end (`ideal`, `PASS`, ...).
    pub short: String,
    /// A mark (grey): a configured value such as a marking threshold, neither the ideal
    /// nor a PASS threshold.
    pub mark: bool,
}

/// One bar chart of `--plot`: a column of some rows (or several columns of one row).
#[derive(Clone, Debug)]
pub struct Panel {
    /// Panel title (the quantity when empty).
    pub title: String,
    /// Column plotted.
    pub column: String,
    /// Value axis quantity, e.g. `aggregate goodput`.
    pub quantity: String,
    /// Value axis unit.
    pub unit: Unit,
    /// Category axis title.
    pub x_title: String,
    /// Rows whose label starts with this, or all.
    pub row_prefix: Option<String>,
    /// Only these row labels (set when a panel is split by scale).
    pub only: Option<Vec<String>>,
    /// Instead of rows: these columns of the first row, as bars.
    pub columns: Option<Vec<String>>,
    /// Reference lines.
    pub lines: Vec<RefLine>,
    /// Category labels drawn instead of the row labels, by row index (shorter ones for
    /// many bars; the table keeps its labels).
    pub bar_labels: Option<Vec<String>>,
}

/// One bar: its category label, value and its row index (for per-row lines).
#[derive(Clone, Debug)]
pub struct Bar {
    /// Category.
    pub label: String,
    /// Value.
    pub value: f64,
    /// Row it came from.
    pub row: usize,
}

impl Panel {
    /// A panel of `column` over the table's rows, quantity and unit from the column name,
    /// categories titled `x_title`.
    pub fn new(column: &str, x_title: &str) -> Panel {
        let (quantity, unit) = Unit::of_column(column);
        Panel {
            title: String::new(),
            column: column.to_owned(),
            quantity,
            unit,
            x_title: x_title.to_owned(),
            row_prefix: None,
            only: None,
            columns: None,
            lines: Vec::new(),
            bar_labels: None,
        }
    }

    /// Sets the title.
    #[must_use]
    pub fn title(mut self, t: impl Into<String>) -> Panel {
        self.title = t.into();
        self
    }

    /// Sets the value axis quantity (the unit stays).
    #[must_use]
    pub fn quantity(mut self, q: impl Into<String>) -> Panel {
        self.quantity = q.into();
        self
    }

    /// Draws `labels[row]` under each row's bar instead of its label (words wrap).
    #[must_use]
    pub fn bar_labels(mut self, labels: Vec<String>) -> Panel {
        self.bar_labels = Some(labels);
        self
    }

    /// Only rows whose label starts with `prefix`.
    #[must_use]
    pub fn rows(mut self, prefix: &str) -> Panel {
        self.row_prefix = Some(prefix.to_owned());
        self
    }

    /// Bars are these columns of the first row (one unit for all).
    #[must_use]
    pub fn columns(mut self, cols: &[&str], unit: Unit) -> Panel {
        self.columns = Some(cols.iter().map(|c| (*c).to_owned()).collect());
        self.unit = unit;
        self
    }

    /// An ideal line (solid) at `v`.
    #[must_use]
    pub fn ideal(mut self, v: f64, label: impl Into<String>) -> Panel {
        self.lines.push(RefLine {
            value: LineValue::Const(v),
            label: label.into(),
            threshold: false,
            short: "ideal".into(),
            mark: false,
        });
        self
    }

    /// A grey mark line at `v` (a configured value), `short` at its right end.
    #[must_use]
    pub fn mark(mut self, v: f64, label: impl Into<String>, short: &str) -> Panel {
        self.lines.push(RefLine {
            value: LineValue::Const(v),
            label: label.into(),
            threshold: false,
            short: short.into(),
            mark: true,
        });
        self
    }

    /// A PASS threshold line (dashed) at `v`.
    #[must_use]
    pub fn threshold(mut self, v: f64, label: impl Into<String>) -> Panel {
        self.lines.push(RefLine {
            value: LineValue::Const(v),
            label: label.into(),
            threshold: true,
            short: "PASS".into(),
            mark: false,
        });
        self
    }

    /// A line over each bar at `factor x` its row's `column`.
    #[must_use]
    pub fn per_row(
        mut self,
        column: &str,
        factor: f64,
        label: impl Into<String>,
        threshold: bool,
    ) -> Panel {
        self.lines.push(RefLine {
            value: LineValue::PerRow(column.to_owned(), factor),
            label: label.into(),
            threshold,
            short: if threshold { "PASS" } else { "ideal" }.into(),
            mark: false,
        });
        self
    }

    /// The bars of this panel from `rows`.
    pub fn bars(&self, rows: &[Row]) -> Vec<Bar> {
        if let Some(cols) = &self.columns {
            let Some(r) = rows.first() else {
                return Vec::new();
            };
            return cols
                .iter()
                .filter_map(|c| {
                    r.values.iter().find(|(k, _)| k == c).map(|(k, v)| Bar {
                        label: k.replace('_', " "),
                        value: *v,
                        row: 0,
                    })
                })
                .filter(|b| self.only.as_ref().is_none_or(|o| o.contains(&b.label)))
                .collect();
        }
        rows.iter()
            .enumerate()
            .filter(|(_, r)| {
                self.row_prefix
                    .as_ref()
                    .is_none_or(|p| r.label.starts_with(p.as_str()))
                    && self.only.as_ref().is_none_or(|o| o.contains(&r.label))
            })
            .filter_map(|(i, r)| {
                r.values
                    .iter()
                    .find(|(k, _)| *k == self.column)
                    .map(|(_, v)| Bar {
                        label: r.label.clone(),
                        value: *v,
                        row: i,
                    })
            })
            .collect()
    }

    /// The value axis title: `quantity (unit)`, the unit scaled for `max`.
    pub fn axis_title(&self, max: f64) -> String {
        let (_, u) = self.unit.scale(max);
        if u.is_empty() {
            self.quantity.clone()
        } else {
            format!("{} ({u})", self.quantity)
        }
    }
}

/// Bars grouped so that no group spans more than 10x (positive values; zeros join the
/// smallest group), in bar order within each group; one group when they all fit.
fn scale_groups(bars: &[Bar]) -> Vec<Vec<usize>> {
    let mut idx: Vec<usize> = (0..bars.len())
        .filter(|&i| bars[i].value.is_finite())
        .collect();
    idx.sort_by(|&a, &b| bars[a].value.total_cmp(&bars[b].value));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut lo = f64::NAN;
    for i in idx {
        let v = bars[i].value;
        if groups.is_empty() || (lo > 0.0 && v > 10.0 * lo) {
            groups.push(Vec::new());
            lo = v;
        } else if lo <= 0.0 {
            lo = v;
        }
        if let Some(g) = groups.last_mut() {
            g.push(i);
        }
    }
    for g in &mut groups {
        g.sort_unstable();
    }
    // Largest scale first.
    groups.reverse();
    groups
}

/// A number with at most 3 significant digits, no trailing zeros.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "inf".into();
    }
    let a = v.abs();
    let s = if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// A bar's value: 3 decimals under 10, 1 under 100, else none.
fn fmt_bar(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "inf".into()
    } else if v.fract() == 0.0 && a < 1e6 {
        format!("{v:.0}")
    } else if a < 10.0 {
        format!("{v:.3}")
    } else if a < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// Colour of a reference line: PASS thresholds red, marks grey, ideals green.
fn line_colour(l: &RefLine) -> plotters::style::RGBColor {
    if l.threshold {
        plotters::style::RGBColor(200, 30, 30)
    } else if l.mark {
        plotters::style::RGBColor(120, 120, 120)
    } else {
        plotters::style::RGBColor(0, 140, 60)
    }
}

/// Words of `s` in lines of at most `width` characters (a longer word stands alone).
pub(crate) fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for w in s.split_whitespace() {
        if !cur.is_empty() && cur.len() + 1 + w.len() > width {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(w);
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

struct Layout<'a> {
    title_lines: &'a [String],
    title_h: u32,
    cols: u32,
    grid_rows: u32,
}

/// Checks that `path`'s directory exists (a bare file name is in the current directory),
/// so a run does not end with an unwritable output. `flag` names the option in the error.
///
/// Errors: `FLAG PATH: directory DIR does not exist` (or is not a directory).
pub fn check_output_dir(flag: &str, path: &Path) -> Result<(), String> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => return Ok(()),
    };
    if dir.is_dir() {
        Ok(())
    } else {
        Err(format!(
            "{flag} {}: directory {} does not exist",
            path.display(),
            dir.display()
        ))
    }
}

/// Checks a `--plot` path before a run: extension `.svg` or `.png` (any case) and an
/// existing directory.
///
/// Errors: `--plot PATH: unsupported file type (allowed: .svg, .png)` or the directory
/// error of [`check_output_dir`].
pub fn check_plot_path(path: &Path) -> Result<(), String> {
    let ok = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("svg") || e.eq_ignore_ascii_case("png"));
    if !ok {
        return Err(format!(
            "--plot {}: unsupported file type (allowed: .svg, .png)",
            path.display()
        ));
    }
    check_output_dir("--plot", path)
}

fn draw<B: plotters::prelude::DrawingBackend>(
    backend: B,
    table: &ResultTable,
    panels: &[Panel],
    layout: &Layout<'_>,
) -> Result<(), String> {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let root = backend.into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (w, _) = root.dim_in_pixel();
    for (i, l) in layout.title_lines.iter().enumerate() {
        root.draw(&Text::new(
            l.clone(),
            (w as i32 / 2, 10 + 22 * i as i32),
            ("sans-serif", 17)
                .into_font()
                .style(FontStyle::Bold)
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(|x| e(&x))?;
    }
    let (_, body) = root.split_vertically(layout.title_h);
    let areas = body.split_evenly((layout.grid_rows as usize, layout.cols as usize));
    let small = |size: u32| ("sans-serif", size).into_font().color(&BLACK);
    for (p, area) in panels.iter().zip(areas.iter()) {
        let bars = p.bars(&table.rows);
        if bars.is_empty() {
            continue;
        }
        // Reference values per bar (None: the line does not apply to this bar).
        let line_vals: Vec<Vec<Option<f64>>> = p
            .lines
            .iter()
            .map(|l| {
                bars.iter()
                    .map(|b| match &l.value {
                        LineValue::Const(v) => Some(*v),
                        LineValue::PerRow(c, f) => table.rows[b.row]
                            .values
                            .iter()
                            .find(|(k, _)| k == c)
                            .map(|(_, v)| v * f),
                    })
                    .collect()
            })
            .collect();
        let data_max = bars
            .iter()
            .map(|b| b.value)
            .chain(line_vals.iter().flatten().flatten().copied())
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max);
        let (div, _) = p.unit.scale(data_max);
        let top = (data_max / div).max(1e-9) * 1.18;
        let n = bars.len();
        // One extra slot on the right for the lines' labels when there are lines.
        let gutter = if p.lines.is_empty() { 0.0 } else { 0.9 };
        let xmax = n as f64 - 0.5 + gutter;
        let (ax, ay) = area.get_base_pixel();
        let (aw, ah) = area.dim_in_pixel();
        let legend_h = 8 + 24 * (1 + p.lines.len() as u32).div_ceil(2);
        let (chart_area, _) = area.split_vertically(ah.saturating_sub(legend_h));
        let slot_px = (f64::from(aw) - 110.0) / (xmax + 0.5);
        // Wrapped to what fits a slot (7 px a character, 8 px apart), so a label is only
        // dropped when one word is wider than its slot.
        let chars_in = |px: f64| (((px - 8.0) / 7.0) as usize).max(4);
        let chars = chars_in(slot_px);
        let label_of = |b: &Bar| -> String {
            p.bar_labels
                .as_ref()
                .and_then(|v| v.get(b.row))
                .unwrap_or(&b.label)
                .clone()
        };
        // With many bars, label every `every`-th and drop the values on the bars.
        let widest = bars
            .iter()
            .flat_map(|b| wrap(&label_of(b), chars))
            .map(|l| l.len())
            .max()
            .unwrap_or(1);
        let every = ((45.0f64.max(widest as f64 * 7.0 + 8.0) / slot_px).ceil() as usize).max(1);
        let values_on_bars = slot_px >= 34.0;
        // A label drawn every `every` bars may use that much room.
        let chars = if every > 1 {
            chars_in(slot_px * every as f64)
        } else {
            chars
        };
        let label_lines: Vec<Vec<String>> =
            bars.iter().map(|b| wrap(&label_of(b), chars)).collect();
        let max_lines = label_lines.iter().map(Vec::len).max().unwrap_or(1).min(4);
        let title = if p.title.is_empty() {
            p.quantity.clone()
        } else {
            p.title.clone()
        };
        let mut chart = ChartBuilder::on(&chart_area)
            .caption(&title, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(30 + 15 * max_lines as u32)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..xmax, 0f64..top)
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .x_labels(0)
            // Whole numbers only for a small count (no 0.5 RTOs).
            .y_labels(if p.unit == Unit::Count && top < 10.0 {
                top.floor() as usize + 1
            } else {
                10
            })
            .x_desc(p.x_title.as_str())
            .y_desc(p.axis_title(data_max))
            .y_label_formatter(&|v| fmt_num(*v))
            .axis_desc_style(("sans-serif", 14))
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(|x| e(&x))?;
        let colour = RGBColor(70, 110, 180);
        chart
            .draw_series(bars.iter().enumerate().map(|(i, b)| {
                let x = i as f64;
                let v = if b.value.is_finite() {
                    b.value / div
                } else {
                    top
                };
                Rectangle::new([(x - 0.32, 0.0), (x + 0.32, v)], colour.filled())
            }))
            .map_err(|x| e(&x))?;
        // Value on each bar, category labels under the axis.
        for (i, b) in bars.iter().enumerate() {
            let x = i as f64;
            let v = if b.value.is_finite() {
                b.value / div
            } else {
                top
            };
            let (px, py) = chart.backend_coord(&(x, v));
            if values_on_bars {
                let (_, py0) = chart.backend_coord(&(x, 0.0));
                // Inside a tall bar, half way up (white; reference lines sit near the
                // top), above a short one.
                let (y, colour, vpos) = if py0 - py > 44 {
                    ((py + py0) / 2, WHITE, VPos::Center)
                } else {
                    (py - 3, BLACK, VPos::Bottom)
                };
                root.draw(&Text::new(
                    fmt_bar(b.value / div),
                    (px, y),
                    ("sans-serif", 12)
                        .into_font()
                        .style(FontStyle::Bold)
                        .color(&colour)
                        .pos(Pos::new(HPos::Center, vpos)),
                ))
                .map_err(|x| e(&x))?;
            }
            if i % every != 0 {
                continue;
            }
            let (_, py0) = chart.backend_coord(&(x, 0.0));
            for (k, l) in label_lines[i].iter().take(4).enumerate() {
                root.draw(&Text::new(
                    l.clone(),
                    (px, py0 + 6 + 15 * k as i32),
                    small(12).pos(Pos::new(HPos::Center, VPos::Top)),
                ))
                .map_err(|x| e(&x))?;
            }
        }
        // Reference lines: solid green ideals, dashed red thresholds.
        let mut used_y: Vec<i32> = Vec::new();
        for (l, vals) in p.lines.iter().zip(&line_vals) {
            let c = line_colour(l);
            let style = c.stroke_width(2);
            let segs: Vec<Vec<(f64, f64)>> = match l.value {
                LineValue::Const(v) => vec![vec![(-0.5, v / div), (n as f64 - 0.5, v / div)]],
                LineValue::PerRow(..) => vals
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| {
                        v.map(|v| vec![(i as f64 - 0.45, v / div), (i as f64 + 0.45, v / div)])
                    })
                    .collect(),
            };
            for s in segs {
                if l.threshold {
                    chart
                        .draw_series(DashedLineSeries::new(s, 8, 5, style))
                        .map_err(|x| e(&x))?;
                } else {
                    chart
                        .draw_series(LineSeries::new(s, style))
                        .map_err(|x| e(&x))?;
                }
            }
            // The short name at the right end, in the gutter.
            if let Some(v) = vals.iter().rev().flatten().next() {
                let (px, mut py) = chart.backend_coord(&(n as f64 - 0.45, v / div));
                // Keep the short names of close lines apart.
                while used_y.iter().any(|u| (u - py).abs() < 13) {
                    py -= 13;
                }
                used_y.push(py);
                root.draw(&Text::new(
                    l.short.clone(),
                    (px, py),
                    ("sans-serif", 12)
                        .into_font()
                        .color(&c)
                        .pos(Pos::new(HPos::Left, VPos::Center)),
                ))
                .map_err(|x| e(&x))?;
            }
        }
        // Legend under the chart: the bars, then each line with its value.
        let mut entries: Vec<(String, Option<(RGBColor, bool)>)> =
            vec![(p.axis_title(data_max), None)];
        for l in &p.lines {
            let c = line_colour(l);
            let text = match l.value {
                LineValue::Const(v) => {
                    let (_, u) = p.unit.scale(data_max);
                    let sep = if l.label.ends_with('=') { " " } else { ": " };
                    format!("{}{sep}{} {u}", l.label, fmt_num(v / div))
                        .trim_end()
                        .to_owned()
                }
                LineValue::PerRow(..) => l.label.clone(),
            };
            entries.push((text, Some((c, l.threshold))));
        }
        let lx0 = ax + 80;
        let col_w = (aw as i32 - 100) / 2;
        for (k, (text, kind)) in entries.iter().enumerate() {
            let x = lx0 + (k as i32 % 2) * col_w;
            let y = ay + ah as i32 - legend_h as i32 + 2 + 24 * (k as i32 / 2);
            match kind {
                None => {
                    root.draw(&Rectangle::new(
                        [(x, y + 2), (x + 22, y + 12)],
                        colour.filled(),
                    ))
                    .map_err(|x| e(&x))?;
                }
                Some((c, dashed)) => {
                    let pts = if *dashed {
                        vec![(x, y + 7), (x + 8, y + 7)]
                    } else {
                        vec![(x, y + 7), (x + 22, y + 7)]
                    };
                    root.draw(&PathElement::new(pts, c.stroke_width(2)))
                        .map_err(|x| e(&x))?;
                    if *dashed {
                        root.draw(&PathElement::new(
                            vec![(x + 14, y + 7), (x + 22, y + 7)],
                            c.stroke_width(2),
                        ))
                        .map_err(|x| e(&x))?;
                    }
                }
            }
            root.draw(&Text::new(
                text.clone(),
                (x + 30, y + 7),
                small(12).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(|x| e(&x))?;
        }
    }
    for (tl, area) in table.timelines.iter().zip(areas.iter().skip(panels.len())) {
        timeline::draw(area, tl)?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
