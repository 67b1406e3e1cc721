//! SVG bar charts for `--plot FILE` (`vmm run`, `vmm bench exits`,
//! `vmm bench init-xstate`): for the figures people would rather look at
//! than read — which bar is taller, how far from the reference line.
//!
//! One small model ([`BarChart`]: groups of bars, each with an optional
//! min..p90 whisker and an optional reference tick such as the raw KVM
//! limit, and an optional horizontal reference line such as ratio 1.0) is
//! drawn with plotters' SVG backend, one chart above the other. The SVG is
//! rendered in memory and written in one go, so a drawing error leaves no
//! half-written file.

use std::path::{Path, PathBuf};

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::PlotError;
use crate::report::RunSummary;

/// One bar.
#[derive(Clone, Debug)]
pub struct Bar {
    /// Under the bar (rotated).
    pub label: String,
    /// Index into [`BarChart::series`]: the bar's colour and legend entry.
    pub series: usize,
    /// The bar's height.
    pub value: f64,
    /// A whisker from `.0` to `.1` (min..p90 of the rounds).
    pub range: Option<(f64, f64)>,
    /// A reference level drawn across this bar (the raw KVM limit).
    pub tick: Option<f64>,
    /// Written above the bar.
    pub text: Option<String>,
}

/// Bars drawn side by side, under one caption.
#[derive(Clone, Debug)]
pub struct BarGroup {
    /// Written above the group.
    pub label: String,
    /// The group's bars.
    pub bars: Vec<Bar>,
}

/// One chart: groups of bars on a common y axis.
#[derive(Clone, Debug)]
pub struct BarChart {
    /// The chart's caption.
    pub title: String,
    /// The y axis' description (with its unit).
    pub y_desc: String,
    /// Legend names of the bar colours.
    pub series: Vec<String>,
    /// The bars.
    pub groups: Vec<BarGroup>,
    /// Legend name of the per-bar [`Bar::tick`]s.
    pub tick_name: Option<String>,
    /// A horizontal line across the chart at `.0`, named `.1` in the legend.
    pub hline: Option<(f64, String)>,
}

impl BarChart {
    /// Whether there is any bar to draw.
    pub fn is_empty(&self) -> bool {
        self.groups.iter().all(|g| g.bars.is_empty())
    }

    fn top(&self) -> f64 {
        let bars = self.groups.iter().flat_map(|g| &g.bars);
        let top = bars
            .flat_map(|b| [Some(b.value), b.range.map(|r| r.1), b.tick])
            .flatten()
            .chain(self.hline.as_ref().map(|h| h.0))
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max);
        if top > 0.0 {
            top * 1.4
        } else {
            1.0
        }
    }
}

/// The colours of [`Bar::series`], in order (then repeated).
const COLOURS: [RGBColor; 6] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xed, 0xc9, 0x48),
];

/// The colour of series `i`.
fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// Refuse a `--plot` path that cannot take the chart, before a long
/// measurement rather than after it: a missing directory, a directory that
/// refuses writes, anything there but a regular file, and a regular file
/// unless `force` (see `crate::output`).
pub fn check_target(path: &Path, force: bool) -> Result<(), PlotError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(PlotError::NoDir {
            path: path.to_path_buf(),
            dir,
        });
    }
    crate::output::check(path, force)
        .map(|_| ())
        .map_err(|source| PlotError::Write {
            path: path.to_path_buf(),
            source,
        })
}

/// Pixel height of one chart.
const CHART_HEIGHT: u32 = 460;

/// Draw `charts` one above the other as SVG text (the tests read it).
#[cfg(test)]
pub fn render_svg(charts: &[BarChart], width: u32) -> Result<String, PlotError> {
    let mut svg = String::new();
    draw(&mut svg, charts, width).map_err(|source| PlotError::Draw {
        path: PathBuf::from("<svg>"),
        source,
    })?;
    Ok(svg)
}

/// Draw `charts` into the SVG file `path`, written as every file `vmm`
/// writes (`crate::output::write_atomic`: a regular file replaced only
/// with `force`, atomically, nothing left behind on failure).
pub fn write_svg(
    path: &Path,
    charts: &[BarChart],
    width: u32,
    force: bool,
) -> Result<(), PlotError> {
    if charts.iter().all(BarChart::is_empty) {
        return Err(PlotError::Empty {
            path: path.to_path_buf(),
            what: "no measured figures to plot",
        });
    }
    let mut svg = String::new();
    draw(&mut svg, charts, width).map_err(|source| PlotError::Draw {
        path: path.to_path_buf(),
        source,
    })?;
    crate::output::write_atomic(path, force, svg.as_bytes())
        .map(|_| ())
        .map_err(|source| PlotError::Write {
            path: path.to_path_buf(),
            source,
        })
}

type DrawError = Box<dyn std::error::Error + Send + Sync>;

fn draw(svg: &mut String, charts: &[BarChart], width: u32) -> Result<(), DrawError> {
    let charts: Vec<&BarChart> = charts.iter().filter(|c| !c.is_empty()).collect();
    let height = CHART_HEIGHT * charts.len().max(1) as u32;
    let root = SVGBackend::with_string(svg, (width, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((charts.len().max(1), 1));
    for (chart, area) in charts.iter().zip(&areas) {
        draw_chart(&root, area, chart)?;
    }
    root.present()?;
    Ok(())
}

fn draw_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    area: &DrawingArea<DB, plotters::coord::Shift>,
    c: &BarChart,
) -> Result<(), DrawError>
where
    DB::ErrorType: 'static,
{
    // Bars occupy one slot each; one empty slot separates groups.
    let mut bars: Vec<(f64, &Bar)> = Vec::new();
    let mut x = 0.5;
    for g in c.groups.iter().filter(|g| !g.bars.is_empty()) {
        for b in &g.bars {
            bars.push((x, b));
            x += 1.0;
        }
        x += 1.0;
    }
    let width = x - 0.5;
    let top = c.top();
    let mut chart = ChartBuilder::on(area)
        .caption(&c.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(150)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..width, 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .max_light_lines(1)
        .x_labels(0)
        .y_desc(c.y_desc.as_str())
        .y_label_formatter(&|v| short(*v))
        .draw()?;
    let half = 0.4;
    // One draw_series per colour, so each gets one legend entry.
    for (i, name) in c.series.iter().enumerate() {
        let mine: Vec<_> = bars.iter().filter(|(_, b)| b.series == i).collect();
        if mine.is_empty() {
            continue;
        }
        let col = colour(i);
        chart
            .draw_series(mine.iter().map(|(x, b)| {
                Rectangle::new([(x - half, 0.0), (x + half, b.value)], col.filled())
            }))?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], col.filled()));
    }
    draw_marks(&mut chart, &bars, c, half, width)?;
    draw_labels(root, &mut chart, &bars, c, top)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// The chart's plotting area: bar slots across, the chart's unit up.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// What is drawn over the bars, each with its legend entry: the whiskers
/// (min..p90 of the rounds), the reference ticks across bars (the raw KVM
/// limit) and the horizontal line. `half` is a bar's half width.
fn draw_marks<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    bars: &[(f64, &Bar)],
    c: &BarChart,
    half: f64,
    width: f64,
) -> Result<(), DrawError>
where
    DB::ErrorType: 'static,
{
    // Whiskers: min..p90 of the rounds.
    let whisker = BLACK.stroke_width(1);
    let ranged: Vec<_> = bars
        .iter()
        .filter_map(|(x, b)| Some((*x, b.range?)))
        .collect();
    if !ranged.is_empty() {
        chart
            .draw_series(ranged.iter().flat_map(|(x, (lo, hi))| {
                let w = 0.15;
                [
                    PathElement::new(vec![(*x, *lo), (*x, *hi)], whisker),
                    PathElement::new(vec![(x - w, *lo), (x + w, *lo)], whisker),
                    PathElement::new(vec![(x - w, *hi), (x + w, *hi)], whisker),
                ]
            }))?
            .label("min..p90 of the rounds")
            .legend(|(x, y)| PathElement::new(vec![(x + 6, y - 6), (x + 6, y + 6)], BLACK));
    }
    // Reference ticks across bars (the raw KVM limit).
    let ticks: Vec<_> = bars
        .iter()
        .filter_map(|(x, b)| Some((*x, b.tick?)))
        .collect();
    if let (Some(name), false) = (&c.tick_name, ticks.is_empty()) {
        let style = RED.stroke_width(3);
        chart
            .draw_series(ticks.iter().map(|(x, t)| {
                PathElement::new(vec![(x - half - 0.05, *t), (x + half + 0.05, *t)], style)
            }))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], style));
    }
    if let Some((level, name)) = &c.hline {
        let style = RED.stroke_width(2);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(0.0, *level), (width, *level)],
                style,
            )))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], style));
    }
    Ok(())
}

/// The text: each bar's value above it, its label under the axis (rotated
/// to read downwards, drawn on `root` so it may leave the plotting area)
/// and each group's caption under its bars' labels.
fn draw_labels<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    chart: &mut Chart<'_, DB>,
    bars: &[(f64, &Bar)],
    c: &BarChart,
    top: f64,
) -> Result<(), DrawError>
where
    DB::ErrorType: 'static,
{
    // Values above the bars.
    let above =
        TextStyle::from(("sans-serif", 10).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart.draw_series(bars.iter().filter_map(|(x, b)| {
        let y = b
            .range
            .map_or(b.value, |r| r.1.max(b.value))
            .max(b.tick.unwrap_or(0.0));
        Some(Text::new(
            b.text.clone()?,
            (*x, y + top * 0.01),
            above.clone(),
        ))
    }))?;
    // Bar labels under the axis, rotated to read downwards.
    let under = TextStyle::from(("sans-serif", 10).into_font()).transform(FontTransform::Rotate90);
    for (x, b) in bars {
        let (px, py) = chart.backend_coord(&(*x, 0.0));
        root.draw(&Text::new(b.label.clone(), (px + 5, py + 6), under.clone()))?;
    }
    // Group captions under their bars' labels.
    let caption =
        TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    let mut first = 0.5;
    for g in c.groups.iter().filter(|g| !g.bars.is_empty()) {
        let mid = first + (g.bars.len() as f64 - 1.0) / 2.0;
        let (px, py) = chart.backend_coord(&(mid, 0.0));
        root.draw(&Text::new(g.label.clone(), (px, py + 128), caption.clone()))?;
        first += g.bars.len() as f64 + 1.0;
    }
    Ok(())
}

/// An axis or bar figure in a few characters: 12.3k, 4.5M, 0.97.
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The charts of `vmm run --plot`: the guest's context-switch strategies
/// (TSC cycles per switch, the chosen one marked) and each workload row's
/// guest/native throughput ratio against the 1.0 line.
pub fn run_charts(s: &RunSummary) -> Vec<BarChart> {
    let chosen = s.switch_strategy.as_deref();
    let switches = BarChart {
        title: "In-guest context-switch strategies (measured at boot)".into(),
        y_desc: "TSC cycles per switch".into(),
        series: vec!["candidate".into(), "chosen by the guest".into()],
        groups: vec![BarGroup {
            label: String::new(),
            bars: s
                .switch_cycles
                .iter()
                .map(|f| Bar {
                    label: f.strategy.to_string(),
                    series: usize::from(Some(f.strategy) == chosen),
                    value: f.cycles as f64,
                    range: None,
                    tick: None,
                    text: Some(short(f.cycles as f64)),
                })
                .collect(),
        }],
        tick_name: None,
        hline: None,
    };
    let ratios = BarChart {
        title: "Workloads: guest / native throughput".into(),
        y_desc: "guest / native (1.0 = native speed)".into(),
        series: vec!["at least native".into(), "below native".into()],
        groups: vec![BarGroup {
            label: String::new(),
            bars: s
                .results
                .iter()
                .filter_map(|r| {
                    let ratio = r.native_ratio?;
                    Some(Bar {
                        label: format!("{} {} {}", r.name, r.variant, r.size),
                        series: usize::from(ratio < 1.0),
                        value: ratio,
                        range: None,
                        tick: None,
                        text: Some(format!("{ratio:.2}")),
                    })
                })
                .collect(),
        }],
        tick_name: None,
        hline: Some((1.0, "native = 1.0".into())),
    };
    vec![switches, ratios]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> BarChart {
        BarChart {
            title: "cost & <noise>".into(),
            y_desc: "ns per exit".into(),
            series: vec!["pio".into(), "mmio".into()],
            groups: vec![
                BarGroup {
                    label: "lazy".into(),
                    bars: vec![
                        Bar {
                            label: "pio cpl3".into(),
                            series: 0,
                            value: 100.0,
                            range: Some((90.0, 120.0)),
                            tick: Some(80.0),
                            text: Some("100".into()),
                        },
                        Bar {
                            label: "mmio cpl3".into(),
                            series: 1,
                            value: 50.0,
                            range: None,
                            tick: Some(40.0),
                            text: None,
                        },
                    ],
                },
                BarGroup {
                    label: "eager".into(),
                    bars: vec![],
                },
            ],
            tick_name: Some("raw KVM limit".into()),
            hline: Some((60.0, "reference".into())),
        }
    }

    #[test]
    fn svg_has_the_labels_and_legend() {
        let svg = render_svg(&[chart()], 800).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.trim_end().ends_with("</svg>"));
        for want in [
            "pio cpl3",
            "mmio cpl3",
            "lazy",
            "raw KVM limit",
            "reference",
            "min..p90 of the rounds",
            "ns per exit",
            "cost &amp; &lt;noise&gt;",
        ] {
            assert!(svg.contains(want), "{want} missing");
        }
    }

    #[test]
    fn refusals() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/dir/x.svg");
        assert!(matches!(
            check_target(&missing, false),
            Err(PlotError::NoDir { .. })
        ));
        assert!(check_target(&dir.path().join("x.svg"), false).is_ok());
        assert!(check_target(Path::new("x.svg"), false).is_ok());
        // An existing chart only with --force; a symlink, even dangling,
        // or a FIFO never (it would block, or write elsewhere).
        let old = dir.path().join("old.svg");
        std::fs::write(&old, "<svg/>").unwrap();
        assert!(matches!(
            check_target(&old, false),
            Err(PlotError::Write { .. })
        ));
        assert!(check_target(&old, true).is_ok());
        let link = dir.path().join("link.svg");
        std::os::unix::fs::symlink(dir.path().join("nowhere.svg"), &link).unwrap();
        assert!(check_target(&link, true).is_err());
        let fifo = dir.path().join("fifo.svg");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert!(check_target(&fifo, true).is_err());
        assert!(matches!(
            write_svg(&link, &[chart()], 800, true),
            Err(PlotError::Write { .. })
        ));
        assert!(
            !dir.path().join("nowhere.svg").exists(),
            "nothing written through the link"
        );
        let empty = BarChart {
            groups: vec![],
            ..chart()
        };
        let out = dir.path().join("empty.svg");
        assert!(matches!(
            write_svg(&out, &[empty], 800, false),
            Err(PlotError::Empty { .. })
        ));
        assert!(!out.exists());
        assert_eq!(short(123456.0), "123k");
        assert_eq!(short(1234.0), "1.2k");
        assert_eq!(short(0.973), "0.97");
        assert_eq!(short(2_500_000.0), "2.5M");
    }
}
