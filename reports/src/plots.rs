//! SVG charts drawn with plotters: line charts (trade curves, bytes per token against budget,
//! latency CDFs, tokens per second against batch, concentration curves), stacked bars (time
//! split) and a heat map (per-layer skew). Each function returns the SVG text; the series
//! names appear as legend text so a reader (and the tests) can tell the lines apart.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// Size of every chart in pixels (width, height).
pub const SIZE: (u32, u32) = (900, 480);

/// One line of a line chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points, drawn in the given order.
    pub points: Vec<(f64, f64)>,
    /// Dashed line: used for bounds (Belady, the ideal) and secondary quantities.
    pub dashed: bool,
    /// Draw points as steps (x held until the next point), for CDFs.
    pub step: bool,
    /// Palette index, shared by series that belong together (resident and transfer of one
    /// packing order); `None`: the series' position in the chart.
    pub color: Option<usize>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            dashed: false,
            step: false,
            color: None,
        }
    }
    pub fn color(mut self, i: usize) -> Series {
        self.color = Some(i);
        self
    }
    pub fn dashed(mut self) -> Series {
        self.dashed = true;
        self
    }
    pub fn step(mut self) -> Series {
        self.step = true;
        self
    }
}

/// Axis scale of a line chart.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    Linear,
    /// Base-2 logarithmic x axis (chunk sizes, batch sizes); all x must be > 0.
    Log2,
}

/// Labels and scale of a line chart.
#[derive(Clone, Debug, PartialEq)]
pub struct LineChart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub x_scale: Scale,
    /// Start the y axis at 0 (true for quantities such as MiB and tokens/s).
    pub y_from_zero: bool,
}

/// Distinct series colours: the Okabe-Ito colour-blind-safe palette (Okabe & Ito 2008, less
/// black, reserved for bounds, and yellow, too faint on white) with a brown, then five of Paul
/// Tol's "muted" scheme (Tol 2021, SRON/EPS/TN/09-002) unlike any of them. A chart with more
/// series draws the later ones dashed, so no two series look alike up to twice this count.
const PALETTE: [RGBColor; 12] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(140, 110, 60),
    RGBColor(51, 34, 136),
    RGBColor(136, 34, 85),
    RGBColor(153, 153, 51),
    RGBColor(68, 170, 153),
    RGBColor(204, 102, 119),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn span(v: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    v.filter(|x| x.is_finite()).fold(None, |acc, x| match acc {
        None => Some((x, x)),
        Some((a, b)) => Some((a.min(x), b.max(x))),
    })
}

fn pad(lo: f64, hi: f64, from_zero: bool) -> (f64, f64) {
    let lo = if from_zero { lo.min(0.0) } else { lo };
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        (
            lo - 1.0_f64.max(lo.abs() * 0.1),
            hi + 1.0_f64.max(hi.abs() * 0.1),
        )
    } else {
        let m = (hi - lo) * 0.05;
        (if from_zero && lo >= 0.0 { lo } else { lo - m }, hi + m)
    }
}

/// Font sizes of tick labels and legend text, and of axis titles, as plotters takes them:
/// its SVG backend writes a size s as `font-size` s / 1.24 px (plotters-svg 0.3, `svg.rs`),
/// so 16 and 17 are 12.9 and 13.7 px. Charts are drawn at [`SIZE`] and shown at that width in
/// a 1400 px window (the report's column is wider), so these are the sizes on screen, above
/// the 12 px floor of readable chart text (the headless-Chromium report test checks it).
const LABEL_PX: u32 = 16;
const AXIS_PX: u32 = 17;

/// Width in pixels of the legend panel right of the plot.
const LEGEND_W: u32 = 230;

/// One legend entry: text, colour, and the line's look (`Some(dashed)`; `None`: a filled box).
type Entry = (String, RGBColor, Option<bool>);

/// Draw the legend entries top-down in `area`, the panel right of the plot.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[Entry],
) -> anyhow::Result<()> {
    let style = ("sans-serif", LABEL_PX).into_font().color(&BLACK);
    for (i, (name, c, look)) in entries.iter().enumerate() {
        let y = 48 + 20 * i as i32;
        match look {
            Some(false) => area
                .draw(&PathElement::new(vec![(6, y), (30, y)], c.stroke_width(2)))
                .map_err(err)?,
            Some(true) => {
                for x in [6, 16, 26] {
                    area.draw(&PathElement::new(
                        vec![(x, y), (x + 6, y)],
                        c.stroke_width(2),
                    ))
                    .map_err(err)?;
                }
            }
            None => area
                .draw(&Rectangle::new([(10, y - 6), (24, y + 6)], c.filled()))
                .map_err(err)?,
        }
        area.draw_text(name, &style, (38, y - 7)).map_err(err)?;
    }
    Ok(())
}

/// Refuses an axis plotters cannot draw: a bound or the span not finite (values near
/// f64::MAX). Plotters' tick search never ends on such an axis.
fn plottable(title: &str, axis: &str, lo: f64, hi: f64) -> anyhow::Result<()> {
    if lo.is_finite() && hi.is_finite() && (hi - lo).is_finite() {
        Ok(())
    } else {
        Err(anyhow::anyhow!(
            "drawing the chart {title:?}: its {axis} axis would span {lo:e} to {hi:e}, beyond \
             what can be drawn; the results hold values out of any real range"
        ))
    }
}

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing a chart: {e}")
}

/// Draw a line chart; a chart with no point says "no data" instead of failing.
pub fn line_chart(spec: &LineChart, series: &[Series]) -> anyhow::Result<String> {
    line_chart_marked(spec, series, None)
}

/// A point a chart marks (the recommendation): drawn as a ring with its label beside it.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    pub x: f64,
    pub y: f64,
    /// Legend text of the mark.
    pub label: String,
}

/// [`line_chart`] with `mark` drawn over the lines as a large black ring, named in the legend.
pub fn line_chart_marked(
    spec: &LineChart,
    series: &[Series],
    mark: Option<&Mark>,
) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let whole = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        whole.fill(&WHITE).map_err(err)?;
        let (root, side) = whole.split_horizontally(SIZE.0 - LEGEND_W);
        let log2 = spec.x_scale == Scale::Log2;
        let tx = move |x: f64| if log2 { x.log2() } else { x };
        let xs = span(series.iter().flat_map(|s| s.points.iter().map(|p| tx(p.0))));
        let ys = span(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
        let (Some((x0, x1)), Some((y0, y1))) = (xs, ys) else {
            no_data(&root, spec.title)?;
            whole.present().map_err(err)?;
            drop((root, side, whole));
            return Ok(svg);
        };
        let (x0, x1) = pad(x0, x1, false);
        let (y0, y1) = pad(y0, y1, spec.y_from_zero);
        plottable(spec.title, "x", x0, x1)?;
        plottable(spec.title, "y", y0, y1)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(spec.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(err)?;
        let fmt_x = move |x: &f64| {
            if !log2 {
                trim(*x)
            } else if (x - x.round()).abs() < 1e-9 {
                // only powers of two on a log2 axis
                trim(2f64.powf(x.round()))
            } else {
                String::new()
            }
        };
        let fmt_y = |y: &f64| trim(*y);
        chart
            .configure_mesh()
            .x_desc(spec.x_label)
            .y_desc(spec.y_label)
            .label_style(("sans-serif", LABEL_PX))
            .axis_desc_style(("sans-serif", AXIS_PX))
            .x_labels(if log2 { 64 } else { 10 })
            .x_label_formatter(&fmt_x)
            .y_label_formatter(&fmt_y)
            .light_line_style(RGBColor(240, 240, 240))
            .draw()
            .map_err(err)?;
        let mut entries: Vec<Entry> = Vec::new();
        for (i, s) in series.iter().enumerate() {
            entries.push(draw_line(&mut chart, i, s, tx)?);
        }
        if let Some(m) = mark {
            let at = (tx(m.x), m.y);
            let ring = BLACK.stroke_width(3);
            chart
                .draw_series([Circle::new(at, 9, ring), Circle::new(at, 4, BLACK.filled())])
                .map_err(err)?;
            entries.push((m.label.clone(), BLACK, None));
        }
        legend(&side, &entries)?;
        whole.present().map_err(err)?;
    }
    Ok(svg)
}

/// The title and a "no data" note, for a line chart without a point to draw.
fn no_data(
    root: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    title: &str,
) -> anyhow::Result<()> {
    root.titled(title, ("sans-serif", 20)).map_err(err)?;
    root.draw_text(
        "no data",
        &("sans-serif", 16).into_text_style(root),
        (SIZE.0 as i32 / 2 - 30, SIZE.1 as i32 / 2),
    )
    .map_err(err)?;
    Ok(())
}

/// Draw series `s`, the `i`th of its chart, with x mapped by `tx`: black for a bound, solid or
/// dashed, as steps for a CDF, with markers where the points are few. Returns its legend entry.
fn draw_line(
    chart: &mut ChartContext<SVGBackend, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    i: usize,
    s: &Series,
    tx: impl Fn(f64) -> f64,
) -> anyhow::Result<Entry> {
    let lname = s.name.to_lowercase();
    let c = if lname.contains("belady") || lname.contains("bound") {
        BLACK
    } else {
        color(s.color.unwrap_or(i))
    };
    let mut pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), y)).collect();
    if s.step {
        pts = steps(&pts);
    }
    let few = pts.len() <= 40;
    if s.step && pts.len() > THIN_ABOVE {
        pts = one_per_pixel(chart, pts);
    }
    let style = ShapeStyle::from(&c).stroke_width(2);
    // past the palette a colour repeats: the repeat is dashed
    let dashed = s.dashed || s.color.unwrap_or(i) >= PALETTE.len();
    if dashed {
        chart
            .draw_series(DashedLineSeries::new(pts.clone(), 8, 5, style))
            .map_err(err)?;
    } else {
        chart
            .draw_series(LineSeries::new(pts.clone(), style))
            .map_err(err)?;
    }
    // markers only where the points are few enough to read
    if !s.step && few {
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(err)?;
    }
    Ok((s.name.clone(), c, Some(dashed)))
}

/// Longest step line (a CDF) written point by point; a longer one (a CDF of every step) is
/// thinned by [`one_per_pixel`]. Above the 7 points of a staircase through four percentiles,
/// so those, and every line not drawn as steps, are written as they were.
const THIN_ABOVE: usize = 64;

/// `pts` less each point that lands on the pixel of the point before it: the line drawn is
/// the same, and a CDF of 20,000 steps writes a few hundred points instead of 40,000.
fn one_per_pixel(
    chart: &ChartContext<SVGBackend, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    pts: Vec<(f64, f64)>,
) -> Vec<(f64, f64)> {
    let mut last = None;
    pts.into_iter()
        .filter(|p| {
            let px = Some(chart.backend_coord(p));
            let new = px != last;
            last = px;
            new
        })
        .collect()
}

/// Points as steps: each y is held until the next point's x.
fn steps(pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut st = Vec::with_capacity(pts.len() * 2);
    for (j, &(x, y)) in pts.iter().enumerate() {
        if j > 0 {
            st.push((x, pts[j - 1].1));
        }
        st.push((x, y));
    }
    st
}

/// One stacked part of [`stacked_bars`]: legend name, lane (which of the category's bars it
/// stacks on, from 0), and its value per category.
pub type Part = (String, usize, Vec<f64>);

/// Stacked horizontal bars: per category (top to bottom in the given order) one bar per lane,
/// each stacking its parts. Horizontal so that long category labels stay readable however
/// many there are; lanes let quantities that do not add up (overlapping busy times) sit
/// beside the ones that do instead of on top of them.
pub fn stacked_bars(
    title: &str,
    x_label: &str,
    categories: &[String],
    parts: &[Part],
) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let n = categories.len().max(1);
        let height = SIZE.1.max(110 + 26 * n as u32);
        let whole = SVGBackend::with_string(&mut svg, (SIZE.0, height)).into_drawing_area();
        whole.fill(&WHITE).map_err(err)?;
        let (root, side) = whole.split_horizontally(SIZE.0 - LEGEND_W);
        let lanes = parts.iter().map(|p| p.1 + 1).max().unwrap_or(1);
        let top = (0..categories.len())
            .flat_map(|c| {
                (0..lanes).map(move |l| {
                    parts
                        .iter()
                        .filter(|p| p.1 == l)
                        .map(|p| p.2[c].max(0.0))
                        .sum::<f64>()
                })
            })
            .fold(0.0, f64::max);
        let top = if top > 0.0 { top * 1.08 } else { 1.0 };
        plottable(title, "value", 0.0, top)?;
        let label_w = 40 + 7 * categories.iter().map(|c| c.len()).max().unwrap_or(0) as u32;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(label_w.min(260))
            .build_cartesian_2d(0f64..top, 0f64..n as f64)
            .map_err(err)?;
        let cats = categories.to_vec();
        // category i is drawn at y = n-1-i, so the first one is on top
        let fmt_y = move |y: &f64| {
            let row = y.floor() as usize;
            if (y - row as f64 - 0.5).abs() < 1e-9 && row < n {
                cats.get(n - 1 - row).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(2 * n + 1)
            .y_label_formatter(&fmt_y)
            .label_style(("sans-serif", LABEL_PX))
            .axis_desc_style(("sans-serif", AXIS_PX))
            .x_desc(x_label)
            .x_label_formatter(&|x: &f64| trim(*x))
            .light_line_style(RGBColor(240, 240, 240))
            .draw()
            .map_err(err)?;
        let mut base = vec![vec![0.0; categories.len()]; lanes];
        let mut entries: Vec<Entry> = Vec::new();
        let band = 0.7 / lanes as f64;
        for (pi, (name, lane, vals)) in parts.iter().enumerate() {
            let c = color(pi);
            let rects: Vec<_> = (0..categories.len())
                .map(|i| {
                    let lo = base[*lane][i];
                    let hi = lo + vals[i].max(0.0);
                    base[*lane][i] = hi;
                    // lane 0 on top inside the category's row
                    let y = (n - 1 - i) as f64 + 0.85 - band * (*lane as f64 + 1.0);
                    Rectangle::new([(lo, y + 0.04), (hi, y + band - 0.04)], c.filled())
                })
                .collect();
            chart.draw_series(rects).map_err(err)?;
            entries.push((name.clone(), c, None));
        }
        legend(&side, &entries)?;
        whole.present().map_err(err)?;
    }
    Ok(svg)
}

/// Heat map of `rows[r][c]` in [0, max] (values in `unit`): row r drawn bottom-up as y = r, column c as x = c,
/// white (0) to dark blue (max), with a colour scale right of the map.
pub fn heat_map(
    title: &str,
    x_label: &str,
    y_label: &str,
    unit: &str,
    rows: &[Vec<f64>],
) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let whole = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        whole.fill(&WHITE).map_err(err)?;
        let (root, side) = whole.split_horizontally(SIZE.0 - SCALE_W);
        let nr = rows.len().max(1);
        let nc = rows.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let max = rows
            .iter()
            .flatten()
            .cloned()
            .fold(0.0, f64::max)
            .max(f64::MIN_POSITIVE);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..nc as f64, 0f64..nr as f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .label_style(("sans-serif", LABEL_PX))
            .axis_desc_style(("sans-serif", AXIS_PX))
            .x_desc(x_label)
            .y_desc(y_label)
            .x_label_formatter(&|x: &f64| format!("{}", x.floor() as i64))
            .y_label_formatter(&|y: &f64| format!("{}", y.floor() as i64))
            .draw()
            .map_err(err)?;
        let cells = rows.iter().enumerate().flat_map(|(r, row)| {
            row.iter().enumerate().map(move |(c, &v)| {
                Rectangle::new(
                    [(c as f64, r as f64), (c as f64 + 1.0, r as f64 + 1.0)],
                    shade(v / max).filled(),
                )
            })
        });
        chart.draw_series(cells).map_err(err)?;
        colour_scale(&side, max, unit)?;
        whole.present().map_err(err)?;
    }
    Ok(svg)
}

/// Width in pixels of a heat map's colour-scale panel.
const SCALE_W: u32 = 120;

/// The heat map's colour at `t` in [0, 1]: white (0) to dark blue (1), linear in RGB.
fn shade(t: f64) -> RGBColor {
    let t = t.clamp(0.0, 1.0);
    let mix = |dark: f64| (255.0 - t * (255.0 - dark)) as u8;
    RGBColor(mix(8.0), mix(48.0), mix(107.0))
}

/// A vertical colour bar in `area` from 0 (bottom) to `max` (top), labelled at 0, max / 2 and
/// max, titled with the values' `unit`, so the heat map's shades read as values.
fn colour_scale<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    max: f64,
    unit: &str,
) -> anyhow::Result<()> {
    const STEPS: i32 = 64;
    let (top, bottom, x0, x1) = (60, SIZE.1 as i32 - 60, 14, 38);
    let h = (bottom - top) as f64 / STEPS as f64;
    for i in 0..STEPS {
        let y = bottom as f64 - (i + 1) as f64 * h;
        let t = (i as f64 + 0.5) / STEPS as f64;
        area.draw(&Rectangle::new(
            [(x0, y.floor() as i32), (x1, (y + h).ceil() as i32)],
            shade(t).filled(),
        ))
        .map_err(err)?;
    }
    area.draw(&Rectangle::new(
        [(x0, top), (x1, bottom)],
        BLACK.stroke_width(1),
    ))
    .map_err(err)?;
    let style = ("sans-serif", LABEL_PX).into_font().color(&BLACK);
    for (frac, v) in [(0.0, 0.0), (0.5, max / 2.0), (1.0, max)] {
        let y = bottom - ((bottom - top) as f64 * frac) as i32;
        area.draw_text(&trim(v), &style, (x1 + 6, y - 7))
            .map_err(err)?;
    }
    area.draw_text(unit, &style, (x0, top - 24)).map_err(err)?;
    Ok(())
}

/// Short number text for axis labels: integers without decimals, others to 3 significant digits.
pub fn trim(x: f64) -> String {
    if x == x.round() && x.abs() < 1e12 {
        format!("{}", x as i64)
    } else {
        let s = format!("{:.3}", x);
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_string()
    }
}
