//! Structural figures of `mrc-sim design --plot` and `mrc-sim trace --plot`: the fabric
//! as boxes and links, not as numbers.
//!
//! A figure is first laid out as a list of [`Shape`]s in pixels ([`Figure`]), then drawn
//! with plotters as SVG or PNG ([`Figure::draw`]); tests count the shapes by [`Kind`].
//!
//! - [`design_figure`]: servers (their GPUs/NICs as squares) under their leaves, one line
//!   per server-leaf NIC bundle, leaves, spines and one line per leaf-spine pair (its lane
//!   count as the line width, and as a label on small fabrics), one colour per plane.
//!   Large fabrics are elided, never overdrawn: at most [`MAX_RACKS`] leaves per plane
//!   (the first ones and the last), [`MAX_SERVERS_PER_LEAF`] servers per leaf and
//!   [`MAX_SPINE_BOXES`] spines in all, the title saying `x of y drawn`.
//! - [`trace_figure`]: the source and destination hosts, their leaves and the spines of
//!   the traced plane, and each EV's hop-by-hop path in its own colour (legend: EV, UDP
//!   source port, spine and egress ports); above [`MAX_EV_PATHS`] EVs, one line per spine
//!   coloured by spine, its width and label the number of EVs that take it.

use std::path::Path;

use mrc_fabric::sim::host::ev_src_port;
use mrc_fabric::sim::net::TraceHop;
use mrc_fabric::sim::topo::Role;
use mrc_fabric::sim::{FabricDesign, NicPlace, Topology};

use super::design::{hop_text, trace_kind};
use super::output::{check_plot_path, wrap};

/// Most leaves drawn per plane (more: the first `MAX_RACKS - 1`, a gap, the last).
pub const MAX_RACKS: u32 = 10;
/// Most servers drawn under one leaf (more: `+ N more servers`).
pub const MAX_SERVERS_PER_LEAF: u32 = 4;
/// Most spine boxes drawn over all planes (more: the first ones of each plane, a gap, the
/// last).
pub const MAX_SPINE_BOXES: u32 = 20;
/// Most planes drawn (more: planes `0..MAX_PLANES`, the title says so).
pub const MAX_PLANES: u32 = 4;
/// Most EVs a trace figure draws one path each for; more are drawn per spine.
pub const MAX_EV_PATHS: usize = 12;
/// Most spines a trace figure draws (more: only the spines some EV takes).
pub const MAX_TRACE_SPINES: u32 = 24;

/// An RGB colour.
pub type Rgb = (u8, u8, u8);

/// What a shape stands for (tests count shapes by kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The figure's title.
    Title,
    /// A server box.
    Server,
    /// A GPU and its NIC, a square in a server box.
    Nic,
    /// A leaf switch.
    Leaf,
    /// A spine switch.
    Spine,
    /// A traced host (one NIC of one server).
    Host,
    /// A note standing for what is not drawn (`... 22 more leaves`).
    Elided,
    /// A server's NIC links to one leaf (one line per server and plane).
    NicLink,
    /// The lanes of one leaf-spine pair (one line per pair).
    Uplink,
    /// One EV's path (trace), or the EVs of one spine (aggregated trace).
    EvPath,
    /// A label on a link (lane count, EV count).
    LinkLabel,
    /// A plane's name over its spines.
    PlaneLabel,
    /// A legend sample or text.
    Legend,
}

/// Horizontal anchor of a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HAnchor {
    /// Text starts at x.
    Left,
    /// Text is centred on x.
    Center,
}

/// One drawn element, pixel coordinates from the top-left corner.
#[derive(Clone, Debug)]
pub enum Shape {
    /// A filled rectangle with an optional 1-pixel border.
    Rect {
        /// What it stands for.
        kind: Kind,
        /// Top-left corner.
        from: (i32, i32),
        /// Bottom-right corner.
        to: (i32, i32),
        /// Fill.
        fill: Rgb,
        /// Border.
        border: Option<Rgb>,
    },
    /// A polyline.
    Line {
        /// What it stands for.
        kind: Kind,
        /// Its points.
        points: Vec<(i32, i32)>,
        /// Colour.
        colour: Rgb,
        /// Width, pixels.
        width_px: u32,
    },
    /// A text, vertically centred on its point.
    Text {
        /// What it stands for.
        kind: Kind,
        /// The text.
        text: String,
        /// Anchor point.
        at: (i32, i32),
        /// Font size, pixels.
        size_px: u32,
        /// Colour.
        colour: Rgb,
        /// Bold.
        bold: bool,
        /// Horizontal anchor.
        anchor: HAnchor,
    },
}

impl Shape {
    /// What the shape stands for.
    pub fn kind(&self) -> Kind {
        match self {
            Shape::Rect { kind, .. } | Shape::Line { kind, .. } | Shape::Text { kind, .. } => *kind,
        }
    }
}

/// A laid-out figure: size and shapes in drawing order (links before the boxes they
/// join).
#[derive(Clone, Debug, Default)]
pub struct Figure {
    /// Width, pixels.
    pub width_px: u32,
    /// Height, pixels.
    pub height_px: u32,
    /// Shapes, drawn in order.
    pub shapes: Vec<Shape>,
}

const BLACK: Rgb = (0, 0, 0);
const GREY: Rgb = (110, 110, 110);
const SERVER_FILL: Rgb = (245, 245, 240);
const NIC_FILL: Rgb = (60, 60, 60);
/// Plane colours: link colour and box fill.
const PLANES: [(Rgb, Rgb); 4] = [
    ((40, 90, 170), (205, 222, 245)),
    ((205, 110, 20), (250, 225, 195)),
    ((30, 140, 70), (205, 238, 210)),
    ((130, 60, 160), (230, 210, 240)),
];
/// Colours of EVs (and of spines in an aggregated trace), cycled.
const PALETTE: [Rgb; 20] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
    (0, 70, 140),
    (170, 0, 90),
    (90, 160, 220),
    (240, 180, 60),
    (120, 200, 100),
    (250, 120, 120),
    (60, 60, 60),
    (200, 160, 230),
    (100, 130, 40),
    (0, 150, 130),
];
const BOX_W: i32 = 66;
const BOX_H: i32 = 30;
const MARGIN: i32 = 40;

impl Figure {
    fn rect(
        &mut self,
        kind: Kind,
        from: (i32, i32),
        to: (i32, i32),
        fill: Rgb,
        border: Option<Rgb>,
    ) {
        self.shapes.push(Shape::Rect {
            kind,
            from,
            to,
            fill,
            border,
        });
    }

    fn line(&mut self, kind: Kind, points: Vec<(i32, i32)>, colour: Rgb, width_px: u32) {
        self.shapes.push(Shape::Line {
            kind,
            points,
            colour,
            width_px,
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn text(
        &mut self,
        kind: Kind,
        text: impl Into<String>,
        at: (i32, i32),
        size_px: u32,
        colour: Rgb,
        bold: bool,
        anchor: HAnchor,
    ) {
        self.shapes.push(Shape::Text {
            kind,
            text: text.into(),
            at,
            size_px,
            colour,
            bold,
            anchor,
        });
    }

    /// A labelled switch or host box centred on `c`.
    fn node_box(&mut self, kind: Kind, c: (i32, i32), w: i32, label: &str, fill: Rgb) {
        self.rect(
            kind,
            (c.0 - w / 2, c.1 - BOX_H / 2),
            (c.0 + w / 2, c.1 + BOX_H / 2),
            fill,
            Some(BLACK),
        );
        self.text(kind, label, c, 12, BLACK, true, HAnchor::Center);
    }

    /// The title, wrapped to the width; returns the y below it.
    fn title(&mut self, lines: &[String]) -> i32 {
        let avail = (self.width_px as usize).saturating_sub(2 * MARGIN as usize);
        let mut y = 20;
        for (i, l) in lines.iter().enumerate() {
            let (size, bold) = if i == 0 { (17, true) } else { (14, false) };
            // Sans-serif averages about 0.55 em per character.
            let chars = avail * 20 / (11 * size as usize);
            for w in wrap(l, chars.max(20)) {
                self.text(
                    Kind::Title,
                    w,
                    (self.width_px as i32 / 2, y),
                    size,
                    BLACK,
                    bold,
                    HAnchor::Center,
                );
                y += 22;
            }
        }
        y
    }

    /// A legend of `(sample, text)` entries in two columns (left column first) from `y`;
    /// returns the y below.
    fn legend(&mut self, y: i32, entries: &[(Sample, String)]) -> i32 {
        let col_w = (self.width_px as i32 - 2 * MARGIN) / 2;
        // One column when an entry would run into the second.
        let widest = entries.iter().map(|(_, t)| t.len()).max().unwrap_or(0) as i32;
        let cols = if 34 + widest * 7 > col_w { 1 } else { 2 };
        let rows = entries.len().div_ceil(cols).max(1) as i32;
        // Column-major: the first half down the left column.
        for (k, (sample, text)) in entries.iter().enumerate() {
            let x = MARGIN + (k as i32 / rows) * col_w;
            let yy = y + 22 * (k as i32 % rows);
            match *sample {
                Sample::Box(fill) => {
                    self.rect(
                        Kind::Legend,
                        (x, yy - 7),
                        (x + 26, yy + 7),
                        fill,
                        Some(BLACK),
                    );
                }
                Sample::Line(c, w) => {
                    self.line(Kind::Legend, vec![(x, yy), (x + 26, yy)], c, w);
                }
            }
            self.text(
                Kind::Legend,
                text.clone(),
                (x + 34, yy),
                12,
                BLACK,
                false,
                HAnchor::Left,
            );
        }
        y + 22 * rows
    }

    /// Shapes of `kind` (rectangles, lines and texts).
    pub fn count(&self, kind: Kind) -> usize {
        self.shapes.iter().filter(|s| s.kind() == kind).count()
    }

    /// Rectangles of `kind` (a server box, a NIC square, a switch box).
    pub fn rects(&self, kind: Kind) -> usize {
        self.shapes
            .iter()
            .filter(|s| matches!(s, Shape::Rect { kind: k, .. } if *k == kind))
            .count()
    }

    /// Lines of `kind` as `(points, width_px)`, in drawing order.
    pub fn lines(&self, kind: Kind) -> Vec<(&[(i32, i32)], u32)> {
        self.shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Line {
                    kind: k,
                    points,
                    width_px,
                    ..
                } if *k == kind => Some((points.as_slice(), *width_px)),
                _ => None,
            })
            .collect()
    }

    /// The texts of `kind`, in drawing order.
    pub fn texts(&self, kind: Kind) -> Vec<&str> {
        self.shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Text { kind: k, text, .. } if *k == kind => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Draws the figure to `path`: SVG for `.svg`, PNG for `.png` (any case).
    ///
    /// Errors: the messages of [`check_plot_path`], the file's I/O error, a drawing error.
    pub fn draw(&self, path: &Path) -> Result<(), String> {
        check_plot_path(path)?;
        // Open the file here so an I/O error reads as one (plotters' PNG backend reports
        // it as a Debug dump of the image crate's error).
        std::fs::File::create(path).map_err(|e| e.to_string())?;
        let size = (self.width_px, self.height_px);
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"))
        {
            self.render(plotters::prelude::SVGBackend::new(path, size))
        } else {
            self.render(plotters::prelude::BitMapBackend::new(path, size))
        }
    }

    fn render<B: plotters::prelude::DrawingBackend>(&self, backend: B) -> Result<(), String> {
        use plotters::prelude::*;
        use plotters::style::text_anchor::{HPos, Pos, VPos};
        let e = |x: &dyn std::fmt::Display| x.to_string();
        let rgb = |c: Rgb| RGBColor(c.0, c.1, c.2);
        let root = backend.into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        for s in &self.shapes {
            match s {
                Shape::Rect {
                    from,
                    to,
                    fill,
                    border,
                    ..
                } => {
                    root.draw(&Rectangle::new([*from, *to], rgb(*fill).filled()))
                        .map_err(|x| e(&x))?;
                    if let Some(b) = border {
                        root.draw(&Rectangle::new([*from, *to], rgb(*b).stroke_width(1)))
                            .map_err(|x| e(&x))?;
                    }
                }
                Shape::Line {
                    points,
                    colour,
                    width_px,
                    ..
                } => {
                    root.draw(&PathElement::new(
                        points.clone(),
                        rgb(*colour).stroke_width(*width_px),
                    ))
                    .map_err(|x| e(&x))?;
                }
                Shape::Text {
                    text,
                    at,
                    size_px,
                    colour,
                    bold,
                    anchor,
                    ..
                } => {
                    let h = match anchor {
                        HAnchor::Left => HPos::Left,
                        HAnchor::Center => HPos::Center,
                    };
                    let mut font = ("sans-serif", *size_px).into_font();
                    if *bold {
                        font = font.style(FontStyle::Bold);
                    }
                    root.draw(&Text::new(
                        text.clone(),
                        *at,
                        font.color(&rgb(*colour)).pos(Pos::new(h, VPos::Center)),
                    ))
                    .map_err(|x| e(&x))?;
                }
            }
        }
        root.present().map_err(|x| e(&x))?;
        Ok(())
    }
}

/// A legend sample.
#[derive(Clone, Copy)]
enum Sample {
    Box(Rgb),
    Line(Rgb, u32),
}

/// Which of `0..n` are drawn when at most `max` fit: all, or the first `max - 1` and the
/// last with the hidden count (the gap goes before the last).
fn drawn(n: u32, max: u32) -> (Vec<u32>, u32) {
    if n <= max {
        ((0..n).collect(), 0)
    } else if max < 2 {
        ((0..max).collect(), n - max)
    } else {
        let mut v: Vec<u32> = (0..max - 1).collect();
        v.push(n - 1);
        (v, n - max)
    }
}

/// `1 plane` / `2 planes`.
fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The figure of `mrc-sim design --plot`: the fabric of `d` (see the module docs).
pub fn design_figure(d: &FabricDesign) -> Figure {
    let i = &d.input;
    let p = &d.plane;
    let w = p.wiring();
    let planes = i.planes.clamp(1, MAX_PLANES);
    let (racks, racks_hidden) = drawn(p.leaves, MAX_RACKS);
    let spine_cap = (MAX_SPINE_BOXES / planes).max(3);
    let (spines, spines_hidden) = drawn(p.spines, spine_cap);
    let gps = i.gpus_per_server.max(1);
    let down = p.downlinks_per_leaf.max(1);
    // Servers with a NIC on leaves `a..b`: those of NICs a x down .. min(b x down, gpus)
    // (a range: a leaf of a hostile design may have millions).
    let servers_on = |a: u32, b: u32| -> std::ops::Range<u32> {
        let first = u64::from(a) * u64::from(down);
        let end = (u64::from(b) * u64::from(down)).min(u64::from(p.nic_links));
        if first >= end {
            return 0..0;
        }
        // Both below nic_links, a u32.
        (first / u64::from(gps)) as u32..((end - 1) / u64::from(gps)) as u32 + 1
    };
    let servers_of = |l: u32| servers_on(l, l + 1);
    let most_servers = (0..p.leaves.min(2))
        .chain(p.leaves.saturating_sub(1)..p.leaves)
        .map(|l| servers_of(l).len() as u32)
        .max()
        .unwrap_or(0);
    let servers_drawn = most_servers.min(MAX_SERVERS_PER_LEAF);

    // Widths.
    let rack_w = (planes as i32 * (BOX_W + 6) + 30).max(150);
    let gap_w = 120;
    let racks_w = racks.len() as i32 * rack_w + if racks_hidden > 0 { gap_w } else { 0 };
    let spine_pitch = BOX_W + 12;
    let spine_gap_w = 90;
    let group_w =
        spines.len() as i32 * spine_pitch + if spines_hidden > 0 { spine_gap_w } else { 0 };
    let groups_w = planes as i32 * group_w + (planes as i32 - 1) * 40;
    let width = (2 * MARGIN + racks_w.max(groups_w)).max(1000);
    let mut f = Figure {
        width_px: width as u32,
        ..Figure::default()
    };

    // Title.
    let planes_text = plural(u64::from(i.planes), "plane", "planes");
    let shown = |one: &str, what: &str, a: usize, b: u32| {
        if a as u32 == b && b == 1 {
            format!("the one {one}")
        } else if a as u32 == b {
            format!("all {b} {what}")
        } else {
            format!("{a} of {b} {what}")
        }
    };
    let mut drawn_parts = vec![
        shown("leaf", "leaves", racks.len(), p.leaves),
        format!(
            "{} servers per leaf",
            if servers_drawn == most_servers {
                format!("all {most_servers}")
            } else {
                format!("{servers_drawn} of {most_servers}")
            }
        ),
    ];
    if p.spines > 0 {
        drawn_parts.push(shown("spine", "spines", spines.len(), p.spines));
    }
    if planes < i.planes {
        drawn_parts.push(format!("planes 0-{} of {}", planes - 1, i.planes));
    }
    let title_lines = vec![
        format!(
            "fabric design: {} GPUs = {} servers x {}, {}G NICs, {} oversubscription (actual {:.2}), {planes_text}",
            i.gpus,
            d.servers,
            i.gpus_per_server,
            i.nic_gbps,
            i.oversubscription,
            d.actual_oversubscription
        ),
        format!(
            "{}per plane: {} ({}x{}G), {}, {}G lanes{}; {} cables in all",
            if i.planes > 1 {
                format!(
                    "each NIC split into {} x {}G lanes, one per plane; ",
                    i.planes, p.lane_gbps
                )
            } else {
                String::new()
            },
            plural(u64::from(p.leaves), "leaf", "leaves"),
            i.leaf_radix,
            i.leaf_port_gbps,
            if p.spines == 0 {
                "no spines (one leaf holds every NIC)".to_owned()
            } else {
                format!(
                    "{} ({}x{}G)",
                    plural(u64::from(p.spines), "spine", "spines"),
                    i.spine_radix,
                    i.spine_port_gbps
                )
            },
            p.lane_gbps,
            if p.spines == 0 {
                String::new()
            } else {
                format!(", {} uplink lanes per leaf", p.uplinks_per_leaf)
            },
            d.cables
        ),
        format!("drawn: {}", drawn_parts.join(", ")),
    ];
    let top = f.title(&title_lines) + 10;

    // Rows.
    let spine_y = top + if planes > 1 { 40 } else { 20 } + BOX_H / 2;
    // Without spines (one leaf) the leaves take the spines' row.
    let leaf_y = if p.spines == 0 {
        spine_y
    } else {
        spine_y + 250
    };
    let bus_y = leaf_y + BOX_H / 2 + 14;
    let server_y0 = leaf_y + BOX_H / 2 + 34;
    let server_h = 36;
    let server_pitch = 44;

    // Spine centres per plane.
    let groups_x0 = (width - groups_w) / 2;
    let spine_x = |plane: u32, k: usize| -> i32 {
        let g0 = groups_x0 + plane as i32 * (group_w + 40);
        let gap = if spines_hidden > 0 && k + 1 == spines.len() {
            spine_gap_w
        } else {
            0
        };
        g0 + k as i32 * spine_pitch + spine_pitch / 2 + gap
    };
    // Rack columns.
    let racks_x0 = (width - racks_w) / 2;
    let rack_x = |k: usize| -> i32 {
        let gap = if racks_hidden > 0 && k + 1 == racks.len() {
            gap_w
        } else {
            0
        };
        racks_x0 + k as i32 * rack_w + gap
    };
    let leaf_x = |k: usize, plane: u32| -> i32 {
        let inner = planes as i32 * (BOX_W + 6) - 6;
        rack_x(k) + (rack_w - inner) / 2 + plane as i32 * (BOX_W + 6) + BOX_W / 2
    };

    // Leaf-spine lines first (under the boxes).
    let (min_l, max_l) = (w.min_leaf_spine_lanes(), w.max_leaf_spine_lanes());
    let uniform = min_l == max_l;
    let uplink_lines = planes as usize
        * racks
            .iter()
            .map(|&l| {
                spines
                    .iter()
                    .filter(|&&s| w.leaf_spine_lanes(l, s) > 0)
                    .count()
            })
            .sum::<usize>();
    let label_links = uplink_lines <= 16;
    // A dense mesh draws thinner: 1 and 2 pixels instead of 2 and 4.
    let dense = uplink_lines > 40;
    let width_of = |lanes: u64| -> u32 {
        let (thin, thick) = if dense { (1, 2) } else { (2, 4) };
        if uniform || lanes < u64::from(max_l) {
            thin
        } else {
            thick
        }
    };
    let mut labels = Vec::new();
    for plane in 0..planes {
        let colour = PLANES[plane as usize % PLANES.len()].0;
        for (k, &l) in racks.iter().enumerate() {
            for (j, &s) in spines.iter().enumerate() {
                let lanes = w.leaf_spine_lanes(l, s);
                if lanes == 0 {
                    continue;
                }
                let a = (leaf_x(k, plane), leaf_y - BOX_H / 2);
                let b = (spine_x(plane, j), spine_y + BOX_H / 2);
                f.line(Kind::Uplink, vec![a, b], colour, width_of(lanes));
                if label_links {
                    let at = (a.0 + (b.0 - a.0) * 3 / 10, a.1 + (b.1 - a.1) * 3 / 10);
                    labels.push((format!("{lanes} x {}G", p.lane_gbps), at, colour));
                }
            }
        }
    }
    for (t, at, c) in labels {
        let half = (t.len() as i32 * 7) / 2 + 3;
        f.rect(
            Kind::LinkLabel,
            (at.0 - half, at.1 - 8),
            (at.0 + half, at.1 + 8),
            (255, 255, 255),
            None,
        );
        f.text(Kind::LinkLabel, t, at, 12, c, false, HAnchor::Center);
    }

    // Server-leaf lines: from each leaf down to a bus, along a trunk, into the server.
    for (k, &l) in racks.iter().enumerate() {
        let srv = servers_of(l);
        for plane in 0..planes {
            let colour = PLANES[plane as usize % PLANES.len()].0;
            let trunk_x = rack_x(k) + 8 + 6 * plane as i32;
            let by = bus_y + 4 * plane as i32;
            let lx = leaf_x(k, plane);
            for n in 0..(srv.len() as u32).min(servers_drawn) {
                let sy = server_y0
                    + n as i32 * server_pitch
                    + server_h / 2
                    + (2 * plane as i32 - (planes as i32 - 1)) * 3;
                let sx0 = rack_x(k) + 10 + 6 * planes as i32;
                f.line(
                    Kind::NicLink,
                    vec![
                        (lx, leaf_y + BOX_H / 2),
                        (lx, by),
                        (trunk_x, by),
                        (trunk_x, sy),
                        (sx0, sy),
                    ],
                    colour,
                    2,
                );
            }
        }
    }

    // Spine boxes.
    for plane in 0..planes {
        let fill = PLANES[plane as usize % PLANES.len()].1;
        for (j, &s) in spines.iter().enumerate() {
            f.node_box(
                Kind::Spine,
                (spine_x(plane, j), spine_y),
                BOX_W,
                &format!("spine{s}"),
                fill,
            );
        }
        if spines_hidden > 0 {
            let x = spine_x(plane, spines.len() - 1) - spine_pitch / 2 - spine_gap_w / 2;
            f.text(
                Kind::Elided,
                format!("... {spines_hidden} more"),
                (x, spine_y),
                12,
                GREY,
                false,
                HAnchor::Center,
            );
        }
        if planes > 1 && p.spines > 0 {
            let g0 = groups_x0 + plane as i32 * (group_w + 40);
            f.text(
                Kind::PlaneLabel,
                format!("plane {plane}"),
                (g0 + group_w / 2, spine_y - BOX_H / 2 - 14),
                13,
                PLANES[plane as usize % PLANES.len()].0,
                true,
                HAnchor::Center,
            );
        }
    }
    // Leaf boxes and servers.
    let nic_links = p.nic_links;
    for (k, &l) in racks.iter().enumerate() {
        for plane in 0..planes {
            let fill = PLANES[plane as usize % PLANES.len()].1;
            let label = if planes > 1 {
                format!("P{plane} leaf{l}")
            } else {
                format!("leaf{l}")
            };
            f.node_box(Kind::Leaf, (leaf_x(k, plane), leaf_y), BOX_W, &label, fill);
        }
        let srv = servers_of(l);
        let sx0 = rack_x(k) + 10 + 6 * planes as i32;
        let sx1 = rack_x(k) + rack_w - 8;
        for (n, s) in srv.clone().take(servers_drawn as usize).enumerate() {
            let y0 = server_y0 + n as i32 * server_pitch;
            f.rect(
                Kind::Server,
                (sx0, y0),
                (sx1, y0 + server_h),
                SERVER_FILL,
                Some(BLACK),
            );
            f.text(
                Kind::Server,
                format!("server {s}"),
                (sx0 + 5, y0 + 10),
                11,
                BLACK,
                true,
                HAnchor::Left,
            );
            // Its GPUs/NICs: filled on this leaf, hollow on another.
            let fit = ((sx1 - sx0 - 8) / 11).max(1) as u32;
            let nics = gps.min(fit);
            for g in 0..nics {
                let nic = s * gps + g;
                if nic >= nic_links {
                    break;
                }
                let here = nic / down == l;
                let x = sx0 + 5 + g as i32 * 11;
                let y = y0 + 21;
                f.rect(
                    Kind::Nic,
                    (x, y),
                    (x + 8, y + 8),
                    if here { NIC_FILL } else { (255, 255, 255) },
                    Some(NIC_FILL),
                );
            }
            if nics < gps {
                f.text(
                    Kind::Nic,
                    format!("+{}", gps - nics),
                    (sx0 + 7 + nics as i32 * 11, y0 + 25),
                    10,
                    BLACK,
                    false,
                    HAnchor::Left,
                );
            }
        }
        if srv.len() as u32 > servers_drawn {
            let y = server_y0 + servers_drawn as i32 * server_pitch + 6;
            f.text(
                Kind::Elided,
                match srv.len() as u32 - servers_drawn {
                    1 => "+ 1 more server".to_owned(),
                    n => format!("+ {n} more servers"),
                },
                ((sx0 + sx1) / 2, y),
                12,
                GREY,
                false,
                HAnchor::Center,
            );
        }
    }
    if racks_hidden > 0 {
        let x = rack_x(racks.len() - 1) - gap_w / 2;
        f.text(
            Kind::Elided,
            format!("... {racks_hidden} more"),
            (x, leaf_y - 8),
            12,
            GREY,
            false,
            HAnchor::Center,
        );
        f.text(
            Kind::Elided,
            "leaves ...",
            (x, leaf_y + 8),
            12,
            GREY,
            false,
            HAnchor::Center,
        );
        let hidden_servers = servers_on(MAX_RACKS - 1, p.leaves - 1).len();
        f.text(
            Kind::Elided,
            format!("({hidden_servers} servers)"),
            (x, server_y0 + 10),
            12,
            GREY,
            false,
            HAnchor::Center,
        );
    }

    // Legend.
    let servers_bottom = server_y0
        + servers_drawn as i32 * server_pitch
        + if most_servers > servers_drawn { 20 } else { 0 };
    let mut entries = vec![(
        Sample::Box(SERVER_FILL),
        format!(
            "server: {} GPUs, one NIC each (squares; hollow: a NIC on another leaf)",
            i.gpus_per_server
        ),
    )];
    // One entry per kind of box and line (in plane 0's colour), then one per plane's
    // colour when there are several.
    let (line, fill) = PLANES[0];
    let tag = if i.planes > 1 { ", in each plane" } else { "" };
    entries.push((
        Sample::Box(fill),
        if p.spines == 0 {
            format!(
                "leaf ({}x{}G, {} down lanes, no uplinks: no spines){tag}",
                i.leaf_radix, i.leaf_port_gbps, p.downlinks_per_leaf
            )
        } else {
            format!(
                "leaf ({}x{}G, {} down + {} up lanes) and spine ({}x{}G){tag}",
                i.leaf_radix,
                i.leaf_port_gbps,
                p.downlinks_per_leaf,
                p.uplinks_per_leaf,
                i.spine_radix,
                i.spine_port_gbps
            )
        },
    ));
    let per_server = gps.min(p.downlinks_per_leaf);
    entries.push((
        Sample::Line(line, 2),
        format!(
            "server-leaf: the server's {per_server} NIC links, {per_server} x {}G{tag}",
            p.lane_gbps
        ),
    ));
    if p.spines == 0 {
        // No leaf-spine pairs.
    } else if uniform {
        entries.push((
            Sample::Line(line, width_of(u64::from(max_l))),
            format!(
                "leaf-spine pair: {max_l} x {}G lanes (every pair){tag}",
                p.lane_gbps
            ),
        ));
    } else {
        for lanes in [max_l, min_l] {
            entries.push((
                Sample::Line(line, width_of(u64::from(lanes))),
                format!("leaf-spine pair of {lanes} x {}G lanes{tag}", p.lane_gbps),
            ));
        }
    }
    if planes > 1 {
        for plane in 0..planes {
            let (line, fill) = PLANES[plane as usize % PLANES.len()];
            entries.push((
                Sample::Box(fill),
                format!("plane {plane}: its switches (fill)"),
            ));
            entries.push((Sample::Line(line, 2), format!("plane {plane}: its links")));
        }
    }
    let bottom = f.legend(servers_bottom + 30, &entries);
    f.height_px = (bottom + 10) as u32;
    f
}

/// The spine an EV's path crosses (the first hop on a spine), by name.
pub fn spine_of_path(topo: &Topology, hops: &[TraceHop]) -> Option<String> {
    hops.iter()
        .find(|h| {
            topo.node_by_name(&h.node)
                .and_then(|n| topo.nodes.get(n as usize))
                .is_some_and(|n| matches!(n.role, Role::Spine(_)))
        })
        .map(|h| h.node.clone())
}

/// The figure of `mrc-sim trace --plot`: hosts `src` and `dst`, their leaves, the spines
/// and the path of each EV (`traces[ev]`, as [`Simulator::trace`] gives it) on the
/// plane `topo` of design `d` (plane number `plane`: the planes are alike); `forwarding`
/// names the mode in the title (see the module docs).
///
/// [`Simulator::trace`]: mrc_fabric::sim::Simulator::trace
pub fn trace_figure(
    d: &FabricDesign,
    topo: &Topology,
    src: u32,
    dst: u32,
    plane: u32,
    forwarding: &str,
    traces: &[Vec<TraceHop>],
) -> Figure {
    let i = &d.input;
    let p = &d.plane;
    let spine_names: Vec<Option<String>> = traces.iter().map(|h| spine_of_path(topo, h)).collect();
    let n_spines = topo.spines.len() as u32;
    // Spine index -> the EVs that cross it, in EV order.
    let mut evs_of: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    for (ev, n) in spine_names.iter().enumerate() {
        if let Some(s) = n
            .as_deref()
            .and_then(|n| n.strip_prefix("spine")?.parse().ok())
        {
            evs_of.entry(s).or_default().push(ev);
        }
    }
    let used: Vec<u32> = evs_of.keys().copied().collect();
    let src_leaf = topo.leaf_of(src).map(|n| topo.name(n)).unwrap_or_default();
    let dst_leaf = topo.leaf_of(dst).map(|n| topo.name(n)).unwrap_or_default();
    let same_leaf = src_leaf == dst_leaf;
    // A same-leaf path crosses no spine: none is drawn.
    let drawn_spines: Vec<u32> = if same_leaf {
        Vec::new()
    } else if n_spines <= MAX_TRACE_SPINES {
        (0..n_spines).collect()
    } else {
        used.clone()
    };
    let aggregate = traces.len() > MAX_EV_PATHS;
    let spine_pitch = BOX_W + 18;
    let spines_w = drawn_spines.len() as i32 * spine_pitch;
    let width = (2 * MARGIN + spines_w).max(1000);
    let mut f = Figure {
        width_px: width as u32,
        ..Figure::default()
    };
    let gps = i.gpus_per_server.max(1);
    let plane_text = if i.planes > 1 {
        format!(", plane {plane} of {} (the planes are alike)", i.planes)
    } else {
        String::new()
    };
    let kind =
        trace_kind(d, src, dst).unwrap_or(if same_leaf { "same leaf" } else { "cross leaf" });
    let layout = if d.rail.is_some() {
        "rail layout, "
    } else {
        ""
    };
    // `, rail 1 group 0` after a host's NIC in the rail layout.
    let rail_of = |h: u32| match d.nic_place(h) {
        Some(NicPlace {
            rail: Some(r),
            group: Some(g),
            ..
        }) => format!(", rail {r} group {g}"),
        _ => String::new(),
    };
    let mut title = vec![
        format!(
            "trace host{src} -> host{dst}: {forwarding}, {layout}{kind}, {}{plane_text}",
            plural(traces.len() as u64, "EV", "EVs"),
        ),
        format!(
            "{} GPUs, {}G NICs; {}, {}, {} x {}G lanes per leaf-spine pair; host{src} = server {} NIC {}{}, host{dst} = server {} NIC {}{}",
            i.gpus,
            i.nic_gbps,
            plural(u64::from(p.leaves), "leaf", "leaves"),
            plural(u64::from(p.spines), "spine", "spines"),
            p.wiring().max_leaf_spine_lanes(),
            p.lane_gbps,
            src / gps,
            src % gps,
            rail_of(src),
            dst / gps,
            dst % gps,
            rail_of(dst)
        ),
    ];
    if !same_leaf && (drawn_spines.len() as u32) < n_spines {
        title.push(format!(
            "drawn: the {} spines some EV takes, of {n_spines}",
            drawn_spines.len()
        ));
    }
    let top = f.title(&title) + 10;
    let spine_y = top + 30 + BOX_H / 2;
    let leaf_y = spine_y + if same_leaf { 90 } else { 260 };
    let host_y = leaf_y + 120;
    let host_w = 170;
    let (src_x, dst_x) = if same_leaf {
        (width / 2 - 200, width / 2 + 200)
    } else {
        (width / 4, width * 3 / 4)
    };
    let spines_x0 = (width - spines_w) / 2;
    let spine_x = |s: u32| -> Option<i32> {
        drawn_spines
            .iter()
            .position(|&x| x == s)
            .map(|k| spines_x0 + k as i32 * spine_pitch + spine_pitch / 2)
    };
    // Where a hop's node is drawn.
    let at = |name: &str| -> Option<(i32, i32)> {
        if name == format!("host{src}") {
            return Some((src_x, host_y));
        }
        if name == format!("host{dst}") {
            return Some((dst_x, host_y));
        }
        if same_leaf && name == src_leaf {
            return Some((width / 2, leaf_y));
        }
        if name == src_leaf {
            return Some((src_x, leaf_y));
        }
        if name == dst_leaf {
            return Some((dst_x, leaf_y));
        }
        let s: u32 = name.strip_prefix("spine")?.parse().ok()?;
        spine_x(s).map(|x| (x, spine_y))
    };
    let mut entries: Vec<(Sample, String)> = Vec::new();
    if !aggregate {
        let n = traces.len() as i32;
        for (ev, hops) in traces.iter().enumerate() {
            let c = PALETTE[ev % PALETTE.len()];
            let dx = (2 * ev as i32 - (n - 1)) * 2;
            let pts: Vec<(i32, i32)> = hops
                .iter()
                .filter_map(|h| at(&h.node))
                .map(|(x, y)| (x + dx, y))
                .collect();
            f.line(Kind::EvPath, pts, c, 3);
            // The switches' egress ports (the SRH state is in the text trace).
            let ports: Vec<String> = hops
                .iter()
                .filter(|h| h.port.is_some() && !h.node.starts_with("host"))
                .map(|h| {
                    let bare = TraceHop {
                        segments_left: None,
                        ..h.clone()
                    };
                    hop_text(topo, d, &bare)
                })
                .collect();
            let via = match &spine_names[ev] {
                Some(s) => s.clone(),
                None => "no spine".into(),
            };
            entries.push((
                Sample::Line(c, 3),
                format!(
                    "EV {ev} (UDP {}) -> {via}: {}",
                    ev_src_port(ev as u32),
                    ports.join(", ")
                ),
            ));
        }
    } else {
        // One line per spine taken: width and label the number of EVs.
        let per_spine: Vec<(u32, Vec<usize>)> = evs_of.into_iter().collect();
        let max_n = per_spine.iter().map(|(_, e)| e.len()).max().unwrap_or(1);
        let (a, b) = (at(&format!("host{src}")), at(&format!("host{dst}")));
        let (la, lb) = (at(&src_leaf), at(&dst_leaf));
        if let (Some(a), Some(la)) = (a, la) {
            f.line(Kind::EvPath, vec![a, la], BLACK, 3);
        }
        if let (Some(b), Some(lb)) = (b, lb) {
            if !same_leaf {
                f.line(Kind::EvPath, vec![lb, b], BLACK, 3);
            } else if let Some(la) = la {
                f.line(Kind::EvPath, vec![la, b], BLACK, 3);
            }
        }
        let mut labels = Vec::new();
        for (s, evs) in &per_spine {
            let c = PALETTE[*s as usize % PALETTE.len()];
            let width_px = 1 + (6 * evs.len()).div_ceil(max_n) as u32;
            if let (Some(sp), Some(la), Some(lb)) = (spine_x(*s).map(|x| (x, spine_y)), la, lb) {
                f.line(Kind::EvPath, vec![la, sp, lb], c, width_px);
                labels.push((
                    plural(evs.len() as u64, "EV", "EVs"),
                    (sp.0, sp.1 - BOX_H / 2 - 10),
                    c,
                ));
            }
            let list: Vec<String> = evs.iter().take(8).map(|e| e.to_string()).collect();
            let more = if evs.len() > 8 { ", ..." } else { "" };
            entries.push((
                Sample::Line(c, width_px),
                format!(
                    "spine{s}: {} (EV {}{more})",
                    plural(evs.len() as u64, "EV", "EVs"),
                    list.join(", ")
                ),
            ));
        }
        let no_spine = spine_names.iter().filter(|n| n.is_none()).count();
        if no_spine > 0 {
            entries.push((
                Sample::Line(BLACK, 3),
                format!(
                    "{} on the leaf alone (no spine)",
                    plural(no_spine as u64, "EV", "EVs")
                ),
            ));
        }
        entries.push((
            Sample::Line(BLACK, 3),
            format!(
                "host-leaf: all {} EVs (UDP source ports {}-{})",
                traces.len(),
                ev_src_port(0),
                ev_src_port(traces.len() as u32 - 1)
            ),
        ));
        for &s in &drawn_spines {
            if !used.contains(&s) {
                if let Some(x) = spine_x(s) {
                    labels.push(("0 EVs".into(), (x, spine_y - BOX_H / 2 - 10), GREY));
                }
            }
        }
        for (t, at, c) in labels {
            f.text(Kind::LinkLabel, t, at, 12, c, true, HAnchor::Center);
        }
    }
    // Boxes over the lines.
    for &s in &drawn_spines {
        if let Some(x) = spine_x(s) {
            let fill = if used.contains(&s) {
                PLANES[0].1
            } else {
                (240, 240, 240)
            };
            f.node_box(Kind::Spine, (x, spine_y), BOX_W, &format!("spine{s}"), fill);
        }
    }
    if same_leaf {
        f.node_box(
            Kind::Leaf,
            (width / 2, leaf_y),
            BOX_W,
            &src_leaf,
            PLANES[0].1,
        );
        f.text(
            Kind::Elided,
            "same leaf: no spine crossed",
            (width / 2, spine_y),
            13,
            GREY,
            false,
            HAnchor::Center,
        );
    } else {
        f.node_box(Kind::Leaf, (src_x, leaf_y), BOX_W, &src_leaf, PLANES[0].1);
        f.node_box(Kind::Leaf, (dst_x, leaf_y), BOX_W, &dst_leaf, PLANES[0].1);
    }
    for (h, x, role) in [(src, src_x, "source"), (dst, dst_x, "destination")] {
        f.node_box(
            Kind::Host,
            (x, host_y),
            host_w,
            &format!("host{h} ({role})"),
            SERVER_FILL,
        );
        f.text(
            Kind::Host,
            format!("server {} NIC {}", h / gps, h % gps),
            (x, host_y + BOX_H / 2 + 12),
            11,
            GREY,
            false,
            HAnchor::Center,
        );
    }
    let bottom = f.legend(host_y + BOX_H / 2 + 40, &entries);
    f.height_px = (bottom + 10) as u32;
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use mrc_fabric::sim::{DesignInput, SpineLeafSpec, Topology, design};

    /// Servers, NICs, leaves, spines and their links of the reference designs, exactly:
    /// every server of a small fabric, at most 10 leaves and 4 servers per leaf of a large
    /// one with the rest counted in notes.
    #[test]
    fn design_figures_draw_every_part_of_small_fabrics_and_elide_large_ones() {
        // (GPUs, planes) -> servers, NIC squares, leaf boxes, spine boxes, NIC link lines,
        // leaf-spine lines, notes of what is not drawn.
        for ((gpus, planes), want) in [
            // One leaf holds the 16 NICs: no spine.
            ((16, 1), (2, 16, 1, 0, 2, 0, 0)),
            ((64, 1), (8, 64, 2, 1, 8, 2, 0)),
            // One 128-lane leaf per plane holds all 8 servers (no spines): 4 drawn, one
            // note.
            ((64, 2), (4, 32, 2, 0, 8, 0, 1)),
            // 32 leaves: 9 and the last drawn, 4 servers each, 16 spines; the gap's two
            // lines and its server count.
            ((1024, 1), (40, 320, 10, 16, 40, 160, 3)),
            // 16 leaves and 8 spines per plane, 8 servers per leaf: 10 racks of 2 leaves,
            // 4 servers each (10 `+ 4 more` notes and the gap's 3).
            ((1024, 2), (40, 320, 20, 16, 80, 160, 13)),
        ] {
            let mut i = DesignInput::reference(gpus);
            i.planes = planes;
            let f = design_figure(&design(&i).unwrap());
            let got = (
                f.rects(Kind::Server),
                f.rects(Kind::Nic),
                f.rects(Kind::Leaf),
                f.rects(Kind::Spine),
                f.lines(Kind::NicLink).len(),
                f.lines(Kind::Uplink).len(),
                f.count(Kind::Elided),
            );
            assert_eq!(got, want, "{gpus} GPUs, {planes} planes");
        }
        // The small fabric labels each leaf-spine pair with its lanes; the large one says
        // what is not drawn in the title and the notes.
        let mut i = DesignInput::reference(64);
        i.planes = 2;
        let f = design_figure(&design(&i).unwrap());
        assert_eq!(f.texts(Kind::Elided), ["+ 4 more servers"]);
        assert_eq!(f.texts(Kind::Leaf), ["P0 leaf0", "P1 leaf0"]);
        // No spines: the plane is in the leaves' names and the legend, no plane label.
        assert!(f.texts(Kind::PlaneLabel).is_empty());
        let mut i = DesignInput::reference(1024);
        i.planes = 2;
        let f = design_figure(&design(&i).unwrap());
        assert_eq!(f.texts(Kind::PlaneLabel), ["plane 0", "plane 1"]);
        let f = design_figure(&design(&DesignInput::reference(64)).unwrap());
        assert_eq!(f.texts(Kind::LinkLabel), ["32 x 200G", "32 x 200G"]);
        assert_eq!(f.texts(Kind::Leaf), ["leaf0", "leaf1"]);
        let f = design_figure(&design(&DesignInput::reference(1024)).unwrap());
        assert!(f.texts(Kind::LinkLabel).is_empty());
        assert_eq!(
            f.texts(Kind::Title),
            [
                "fabric design: 1024 GPUs = 128 servers x 8, 200G NICs, 1:1 oversubscription (actual 1.00), 1 plane",
                "per plane: 32 leaves (32x400G), 16 spines (32x400G), 200G lanes, 32 uplink lanes per leaf; 2048 cables in all",
                "drawn: 10 of 32 leaves, all 4 servers per leaf, all 16 spines",
            ]
        );
        assert_eq!(
            f.texts(Kind::Elided),
            ["... 22 more", "leaves ...", "(88 servers)"]
        );
        assert_eq!(f.texts(Kind::Leaf).last(), Some(&"leaf31"));
    }

    /// At 2:1 the 20 uplinks of a leaf rotate over 9 spines: 3 lanes to 2 spines, 2 to 7;
    /// the 3-lane pairs draw thicker, and the legend names both.
    #[test]
    fn uneven_leaf_spine_pairs_draw_thicker() {
        let mut i = DesignInput::reference(1024);
        i.oversubscription = "2:1".parse().unwrap();
        let d = design(&i).unwrap();
        let f = design_figure(&d);
        let lines = f.lines(Kind::Uplink);
        // 10 racks x 9 spines, every pair has lanes; leaf0's lines come first.
        assert_eq!(lines.len(), 90);
        let widths: Vec<u32> = lines[..9].iter().map(|(_, w)| *w).collect();
        assert_eq!(widths, [2, 2, 1, 1, 1, 1, 1, 1, 1]);
        let legend = f.texts(Kind::Legend);
        assert!(
            legend.contains(&"leaf-spine pair of 3 x 200G lanes"),
            "{legend:?}"
        );
        assert!(
            legend.contains(&"leaf-spine pair of 2 x 200G lanes"),
            "{legend:?}"
        );
    }

    fn traces(
        gpus: u32,
        src: u32,
        dst: u32,
        evs: u32,
    ) -> (FabricDesign, Topology, Vec<Vec<TraceHop>>) {
        let d = design(&DesignInput::reference(gpus)).unwrap();
        let topo = Topology::spine_leaf(&SpineLeafSpec::from_design(&d, 500)).unwrap();
        let sim =
            mrc_fabric::sim::Simulator::new(topo.clone(), mrc_fabric::sim::SimConfig::default())
                .unwrap();
        let t = (0..evs)
            .map(|ev| sim.trace(src, dst, ev).unwrap())
            .collect();
        (d, topo, t)
    }

    /// Each EV's line goes through the spine its trace crosses, and the legend names it.
    #[test]
    fn trace_figure_draws_each_ev_through_its_spine() {
        let (d, topo, t) = traces(1024, 0, 900, 8);
        let f = trace_figure(&d, &topo, 0, 900, 0, "ecmp", &t);
        assert_eq!(f.rects(Kind::Spine), 16);
        assert_eq!(f.rects(Kind::Leaf), 2);
        assert_eq!(f.rects(Kind::Host), 2);
        let paths = f.lines(Kind::EvPath);
        assert_eq!(paths.len(), 8);
        let legend = f.texts(Kind::Legend);
        for (ev, hops) in t.iter().enumerate() {
            let spine = spine_of_path(&topo, hops).unwrap();
            assert_eq!(hops[2].node, spine);
            // host, leaf, spine, leaf, host; the third point is the spine's box.
            assert_eq!(paths[ev].0.len(), 5);
            let s: usize = spine["spine".len()..].parse().unwrap();
            let box_x = (f.width_px as i32 - 16 * (BOX_W + 18)) / 2
                + s as i32 * (BOX_W + 18)
                + (BOX_W + 18) / 2;
            // Parallel paths sit up to 2 px x EVs apart; spines are 84 px apart.
            assert!((paths[ev].0[2].0 - box_x).abs() <= 16, "EV {ev}");
            let want = format!("EV {ev} (UDP {}) -> {spine}: ", ev_src_port(ev as u32));
            assert!(legend[ev].starts_with(&want), "{} vs {want}", legend[ev]);
        }
    }

    /// Past 12 EVs, one line per spine taken, labelled with its EV count; the counts add
    /// up to the EVs.
    #[test]
    fn many_evs_aggregate_per_spine() {
        let (d, topo, t) = traces(1024, 0, 900, 64);
        let f = trace_figure(&d, &topo, 0, 900, 0, "ecmp", &t);
        let mut per_spine = std::collections::BTreeMap::new();
        for hops in &t {
            *per_spine
                .entry(spine_of_path(&topo, hops).unwrap())
                .or_insert(0usize) += 1;
        }
        // One line per spine taken, and the two host-leaf lines.
        assert_eq!(f.lines(Kind::EvPath).len(), per_spine.len() + 2);
        let legend = f.texts(Kind::Legend);
        for (spine, n) in &per_spine {
            let want = format!("{spine}: {n} EV");
            assert!(
                legend.iter().any(|l| l.starts_with(&want)),
                "{want} in {legend:?}"
            );
        }
        let total: usize = f
            .texts(Kind::LinkLabel)
            .iter()
            .filter_map(|l| l.split(' ').next()?.parse::<usize>().ok())
            .sum();
        assert_eq!(total, 64);
        // A same-leaf trace draws no spine.
        let (d, topo, t) = traces(1024, 0, 3, 4);
        let f = trace_figure(&d, &topo, 0, 3, 0, "ecmp", &t);
        assert_eq!((f.rects(Kind::Spine), f.rects(Kind::Leaf)), (0, 1));
        assert_eq!(f.texts(Kind::Elided), ["same leaf: no spine crossed"]);
    }

    #[test]
    fn drawn_keeps_the_first_and_the_last() {
        assert_eq!(drawn(3, 10), (vec![0, 1, 2], 0));
        assert_eq!(drawn(32, 10), (vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 31], 22));
        assert_eq!(drawn(0, 10), (vec![], 0));
    }
}
