//! Quantities over virtual time (goodput of the plane experiments): lines sampled at common
//! times, vertical marks at the events (a plane down, back), dashed horizontal levels
//! (the targets). In the JSON beside the table, drawn by `--plot` after its bar panels.

use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;

/// One chart of lines over time.
#[derive(Clone, Debug, Serialize)]
pub struct Timeline {
    /// Title.
    pub title: String,
    /// What the value axis shows, with its unit.
    pub y_title: String,
    /// Sample times, us of virtual time.
    pub times_us: Vec<f64>,
    /// Named lines, one value per sample time (NaN: no value).
    pub lines: Vec<(String, Vec<f64>)>,
    /// Vertical marks: time, us, and what happened.
    pub events: Vec<(f64, String)>,
    /// Dashed horizontal levels: value and name.
    pub levels: Vec<(f64, String)>,
}

impl Timeline {
    /// An empty chart.
    pub fn new(title: impl Into<String>, y_title: impl Into<String>) -> Timeline {
        Timeline {
            title: title.into(),
            y_title: y_title.into(),
            times_us: Vec::new(),
            lines: Vec::new(),
            events: Vec::new(),
            levels: Vec::new(),
        }
    }

    /// Adds a line (one value per sample time).
    pub fn line(&mut self, name: impl Into<String>, values: Vec<f64>) {
        self.lines.push((name.into(), values));
    }

    /// Adds a vertical mark at `t_us`.
    pub fn event(&mut self, t_us: f64, what: impl Into<String>) {
        self.events.push((t_us, what.into()));
    }

    /// Adds a dashed level.
    pub fn level(&mut self, v: f64, name: impl Into<String>) {
        self.levels.push((v, name.into()));
    }
}

/// Line colours, in line order (then again).
const COLOURS: [RGBColor; 5] = [
    RGBColor(70, 110, 180),
    RGBColor(220, 120, 30),
    RGBColor(40, 150, 80),
    RGBColor(150, 60, 160),
    RGBColor(120, 120, 120),
];

/// Draws `tl` into `area`: axes (time in us), each line in its colour, the events as grey
/// vertical lines named at the top, the levels dashed in the colour of the line of the
/// same index, a legend.
///
/// Errors: the drawing backend's, as text.
pub fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    tl: &Timeline,
) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let x_max = tl.times_us.last().copied().unwrap_or(1.0).max(1.0);
    let y_max = tl
        .lines
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .chain(tl.levels.iter().map(|(v, _)| *v))
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max)
        * 1.12;
    let mut chart = ChartBuilder::on(area)
        .caption(&tl.title, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .x_desc("virtual time, us")
        .y_desc(tl.y_title.as_str())
        .axis_desc_style(("sans-serif", 14))
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|x| e(&x))?;
    let grey = RGBColor(150, 150, 150);
    for (t, what) in &tl.events {
        chart
            .draw_series(LineSeries::new(
                [(*t, 0.0), (*t, y_max)],
                grey.stroke_width(1),
            ))
            .map_err(|x| e(&x))?;
        chart
            .draw_series(std::iter::once(Text::new(
                what.clone(),
                (*t, y_max * 0.98),
                ("sans-serif", 12).into_font().color(&grey),
            )))
            .map_err(|x| e(&x))?;
    }
    for (i, (v, name)) in tl.levels.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, *v), (x_max, *v)],
                6,
                4,
                c.stroke_width(1),
            ))
            .map_err(|x| e(&x))?
            .label(format!("{name}: {v:.1}"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(1)));
    }
    for (i, (name, values)) in tl.lines.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        let points = tl
            .times_us
            .iter()
            .zip(values)
            .filter(|(_, v)| v.is_finite())
            .map(|(t, v)| (*t, *v));
        chart
            .draw_series(LineSeries::new(points, c.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(|x| e(&x))?;
    Ok(())
}
