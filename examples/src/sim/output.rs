//! Result tables, JSON and plots.

use std::path::Path;

use serde::Serialize;

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

    /// Draws the plot column as bars (SVG for `.svg`, PNG for `.png`).
    ///
    /// Errors: a message when the extension is neither, the directory is missing, the
    /// column is missing or drawing fails.
    pub fn plot(&self, path: &Path) -> Result<(), String> {
        check_plot_path(path)?;
        // Open the file here so an I/O error reads as one (plotters' PNG backend reports
        // it as a Debug dump of the image crate's error).
        std::fs::File::create(path).map_err(|e| e.to_string())?;
        let col = self
            .plot_column
            .clone()
            .or_else(|| {
                self.rows
                    .first()
                    .and_then(|r| r.values.first().map(|(k, _)| k.clone()))
            })
            .ok_or("nothing to plot")?;
        let bars: Vec<(String, f64)> = self
            .rows
            .iter()
            .filter_map(|r| {
                r.values
                    .iter()
                    .find(|(k, _)| *k == col)
                    .map(|(_, v)| (r.label.clone(), *v))
            })
            .collect();
        let svg = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
        if svg {
            let root = plotters::prelude::SVGBackend::new(path, (960, 540));
            draw(root, &self.title, &col, &bars, self.plot_reference)
        } else {
            let root = plotters::prelude::BitMapBackend::new(path, (960, 540));
            draw(root, &self.title, &col, &bars, self.plot_reference)
        }
    }
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
    title: &str,
    y_label: &str,
    bars: &[(String, f64)],
    reference: Option<f64>,
) -> Result<(), String> {
    use plotters::prelude::*;
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let root = backend.into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let max = bars
        .iter()
        .map(|(_, v)| *v)
        .chain(reference)
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let n = bars.len().max(1) as i32;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d((0..n - 1).into_segmented(), 0f64..max)
        .map_err(|x| e(&x))?;
    let labels: Vec<String> = bars.iter().map(|(l, _)| l.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n as usize)
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                labels.get(*i as usize).cloned().unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .y_desc(y_label)
        .draw()
        .map_err(|x| e(&x))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
            let mut r = Rectangle::new(
                [
                    (SegmentValue::Exact(i as i32), 0.0),
                    (SegmentValue::Exact(i as i32 + 1), *v),
                ],
                BLUE.mix(0.7).filled(),
            );
            r.set_margin(0, 0, 20, 20);
            r
        }))
        .map_err(|x| e(&x))?;
    if let Some(r) = reference {
        chart
            .draw_series(LineSeries::new(
                vec![(SegmentValue::Exact(0), r), (SegmentValue::Last, r)],
                &RED,
            ))
            .map_err(|x| e(&x))?
            .label("ideal")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE)
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
