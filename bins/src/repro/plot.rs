//! Charts of `remora repro`, drawn with plotters as SVG and PNG.
//!
//! Text needs a font: the PNG backend rasterizes glyphs with `ab_glyph` from a font
//! compiled into the binary (DejaVu Sans Mono, Bitstream Vera licence, `bins/assets/`), so
//! charts render identically on a machine with no system fonts (a clean CI runner). The
//! SVG names the same family and carries its text as text.
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::path::Path;
use std::sync::OnceLock;

/// The bundled font.
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSansMono.ttf");
/// The family name the charts ask for (registered to the bundled font).
const FAMILY: &str = "sans-serif";
const SIZE: (u32, u32) = (900, 540);

/// One named line: `(x, y)` points.
pub type Line = (String, Vec<(f64, f64)>);

/// What a chart shows.
#[derive(Debug, Clone)]
pub enum ChartSpec {
    /// Lines over a numeric x axis (throughput vs clients).
    Curve {
        title: String,
        x_label: String,
        y_label: String,
        lines: Vec<Line>,
    },
    /// Grouped bars: one group per `groups` entry, one bar per series (NaN: no bar).
    Bars {
        title: String,
        y_label: String,
        groups: Vec<String>,
        series: Vec<(String, Vec<f64>)>,
    },
    /// Latency CDFs: `(latency µs, fraction)` per line, log-scale x.
    Cdf { title: String, lines: Vec<Line> },
}

fn register_font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font(FAMILY, FontStyle::Normal, FONT)
            .map_err(|_| "the bundled chart font does not parse".to_string())
    })
    .clone()
}

/// Writes `stem.svg` and `stem.png`.
pub fn write(stem: &Path, spec: &ChartSpec) -> Result<(), String> {
    register_font()?;
    let svg_path = stem.with_extension("svg");
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw(&root, spec)?;
        root.present().map_err(|e| e.to_string())?;
    }
    std::fs::write(&svg_path, svg).map_err(|e| format!("{}: {e}", svg_path.display()))?;
    let mut rgb = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area();
        draw(&root, spec)?;
        root.present().map_err(|e| e.to_string())?;
    }
    let png_path = stem.with_extension("png");
    write_png(&png_path, &rgb, SIZE).map_err(|e| format!("{}: {e}", png_path.display()))
}

fn write_png(path: &Path, rgb: &[u8], (w, h): (u32, u32)) -> Result<(), String> {
    let file = std::fs::File::create(path).map_err(|e| e.to_string())?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::High);
    let mut wr = enc.write_header().map_err(|e| e.to_string())?;
    wr.write_image_data(rgb).map_err(|e| e.to_string())?;
    wr.finish().map_err(|e| e.to_string())
}

fn color(i: usize) -> RGBColor {
    // Colour-blind-safe (Okabe-Ito), then plotters' palette.
    const OI: [RGBColor; 7] = [
        RGBColor(0, 114, 178),
        RGBColor(213, 94, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(230, 159, 0),
        RGBColor(86, 180, 233),
        RGBColor(0, 0, 0),
    ];
    if i < OI.len() {
        OI[i]
    } else {
        let c = Palette99::pick(i).to_rgba();
        RGBColor(c.0, c.1, c.2)
    }
}

/// The upper end of a value axis: a little above the largest finite value.
fn top(values: impl Iterator<Item = f64>) -> f64 {
    let m = values.filter(|v| v.is_finite()).fold(0.0f64, f64::max);
    if m > 0.0 { m * 1.12 } else { 1.0 }
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, spec: &ChartSpec) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let cap = (FAMILY, 22).into_font();
    let lab = (FAMILY, 15).into_font();
    match spec {
        ChartSpec::Curve {
            title,
            x_label,
            y_label,
            lines,
        } => {
            let xmax = top(lines.iter().flat_map(|l| l.1.iter().map(|p| p.0)));
            let ymax = top(lines.iter().flat_map(|l| l.1.iter().map(|p| p.1)));
            let mut ch = ChartBuilder::on(root)
                .caption(title, cap)
                .margin(16)
                .x_label_area_size(44)
                .y_label_area_size(64)
                .build_cartesian_2d(0f64..xmax, 0f64..ymax)
                .map_err(e)?;
            ch.configure_mesh()
                .x_desc(x_label.as_str())
                .y_desc(y_label.as_str())
                .label_style(lab.clone())
                .draw()
                .map_err(e)?;
            for (i, (name, pts)) in lines.iter().enumerate() {
                let c = color(i);
                ch.draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                    .map_err(e)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                    });
                ch.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                    .map_err(e)?;
            }
            legend(&mut ch, lab, SeriesLabelPosition::LowerRight)?;
        }
        ChartSpec::Bars {
            title,
            y_label,
            groups,
            series,
        } => {
            let n = groups.len().max(1) as f64;
            let ymax = top(series.iter().flat_map(|s| s.1.iter().copied()));
            let mut ch = ChartBuilder::on(root)
                .caption(title, cap)
                .margin(16)
                .x_label_area_size(44)
                .y_label_area_size(64)
                .build_cartesian_2d(-0.5f64..n - 0.5, 0f64..ymax)
                .map_err(e)?;
            let name_at = |x: &f64| {
                let r = x.round();
                if (x - r).abs() < 1e-6 && r >= 0.0 {
                    groups.get(r as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            };
            ch.configure_mesh()
                .disable_x_mesh()
                .x_labels(groups.len().max(1))
                .x_label_formatter(&name_at)
                .y_desc(y_label.as_str())
                .label_style(lab.clone())
                .draw()
                .map_err(e)?;
            let k = series.len().max(1) as f64;
            let w = 0.8 / k;
            for (j, (name, vals)) in series.iter().enumerate() {
                let c = color(j);
                let bars =
                    vals.iter()
                        .enumerate()
                        .filter(|(_, v)| v.is_finite())
                        .map(move |(g, &v)| {
                            let x0 = g as f64 - 0.4 + j as f64 * w;
                            Rectangle::new([(x0, 0.0), (x0 + w * 0.92, v)], c.filled())
                        });
                ch.draw_series(bars)
                    .map_err(e)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled())
                    });
            }
            legend(&mut ch, lab, SeriesLabelPosition::UpperLeft)?;
        }
        ChartSpec::Cdf { title, lines } => {
            let pos = || {
                lines
                    .iter()
                    .flat_map(|l| l.1.iter().map(|p| p.0))
                    .filter(|v| *v > 0.0 && v.is_finite())
            };
            let lo = pos().fold(f64::INFINITY, f64::min);
            let hi = pos().fold(0.0f64, f64::max);
            let (lo, hi) = if lo.is_finite() && hi > lo {
                (lo / 1.5, hi * 1.5)
            } else {
                (0.1, 1000.0)
            };
            let mut ch = ChartBuilder::on(root)
                .caption(title, cap)
                .margin(16)
                .x_label_area_size(44)
                .y_label_area_size(64)
                .build_cartesian_2d((lo..hi).log_scale(), 0f64..1.0)
                .map_err(e)?;
            ch.configure_mesh()
                .x_desc("latency (µs, log scale)")
                .y_desc("fraction of operations")
                .label_style(lab.clone())
                .draw()
                .map_err(e)?;
            for (i, (name, pts)) in lines.iter().enumerate() {
                let c = color(i);
                ch.draw_series(LineSeries::new(
                    pts.iter().copied().filter(|p| p.0 > 0.0),
                    c.stroke_width(2),
                ))
                .map_err(e)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
            }
            legend(&mut ch, lab, SeriesLabelPosition::LowerRight)?;
        }
    }
    Ok(())
}

/// The legend box, where the data leaves room: bars start at zero (upper left is free of
/// the first group's short bars more often than not); rising curves and CDFs leave the lower
/// right free.
fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    ch: &mut ChartContext<'a, DB, CT>,
    font: FontDesc<'a>,
    pos: SeriesLabelPosition,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    ch.configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(font)
        .draw()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("remora-plot-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.join(name)
    }

    fn check(stem: &Path, text: &str) {
        let svg = std::fs::read_to_string(stem.with_extension("svg")).unwrap();
        assert!(svg.starts_with("<svg"), "not an SVG");
        assert!(svg.contains(text), "the SVG lacks `{text}`");
        let png = std::fs::read(stem.with_extension("png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        // A chart with text and lines is not one flat colour: decode and count colours.
        let dec = png::Decoder::new(std::io::Cursor::new(png));
        let mut r = dec.read_info().unwrap();
        let mut buf = vec![0; r.output_buffer_size().unwrap()];
        r.next_frame(&mut buf).unwrap();
        let distinct: std::collections::HashSet<&[u8]> = buf.chunks(3).collect();
        assert!(distinct.len() > 5, "PNG has {} colours", distinct.len());
    }

    #[test]
    fn draws_each_chart_kind() {
        let s = tmp("curve");
        let lines = vec![
            ("smart".to_string(), vec![(16.0, 10.0), (32.0, 18.0)]),
            ("sherman".to_string(), vec![(16.0, 5.0), (32.0, 6.0)]),
        ];
        write(
            &s,
            &ChartSpec::Curve {
                title: "YCSB-C".into(),
                x_label: "clients".into(),
                y_label: "Mops".into(),
                lines,
            },
        )
        .unwrap();
        check(&s, "sherman");
        let b = tmp("bars");
        write(
            &b,
            &ChartSpec::Bars {
                title: "factors".into(),
                y_label: "Mops".into(),
                groups: vec!["LOAD".into(), "A".into()],
                series: vec![
                    ("FG+".into(), vec![1.0, 2.0]),
                    ("+ on-chip".into(), vec![f64::NAN, 3.0]),
                ],
            },
        )
        .unwrap();
        check(&b, "on-chip");
        let c = tmp("cdf");
        write(
            &c,
            &ChartSpec::Cdf {
                title: "latency".into(),
                lines: vec![("x".into(), vec![(1.0, 0.0), (2.0, 0.5), (9.0, 1.0)])],
            },
        )
        .unwrap();
        check(&c, "latency");
        // An empty chart still draws (axes only), it does not panic.
        let z = tmp("empty");
        write(
            &z,
            &ChartSpec::Cdf {
                title: "none".into(),
                lines: vec![],
            },
        )
        .unwrap();
    }
}
