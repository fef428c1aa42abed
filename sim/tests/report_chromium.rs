//! The HTML report in a real browser: `sim compare` writes `report.html`, headless Chromium
//! (the Debian package `chromium`, which `.ci/run` installs) lays it out in a 1400 px wide
//! window, and a script run after the page loads measures what a reader would see: no table
//! wider than its column, no element past the window's right edge, no horizontal scroll of
//! the page, no broken image, every figure drawn, no chart text under 12 px at its displayed
//! size, and a first screen (1400 x 900 px) holding the answer and the plot of tokens/s against
//! the budget.
//!
//! Without Chromium the test is skipped with a message, unless `CI` is set: there a missing
//! browser is a failure, so the check cannot silently stop running. `CHROMIUM=path` picks
//! another binary.

use std::path::Path;
use std::process::Command;

/// Width of the browser window in CSS pixels: the narrowest desktop window the report is
/// designed for (the issue's acceptance check).
const WINDOW_PX: u32 = 1400;

/// Run after the page loads; writes its findings as JSON into `<pre id="layout-check">`,
/// which `--dump-dom` then prints. Each problem is a sentence naming the element.
const CHECK_JS: &str = r#"<script>
(function () {
  const W = document.documentElement.clientWidth;
  const problems = [];
  const sw = document.documentElement.scrollWidth;
  if (sw > W) problems.push('the page scrolls horizontally: ' + sw + ' px wide in a ' + W + ' px window');
  const tables = document.querySelectorAll('table');
  tables.forEach((t, i) => {
    const box = t.parentElement;
    const right = t.getBoundingClientRect().right;
    const head = (t.querySelector('th') || {}).textContent || '';
    if (box.scrollWidth > box.clientWidth + 1 || right > W)
      problems.push('table ' + i + ' (first column "' + head + '") overflows: ' + box.scrollWidth + ' px in ' + box.clientWidth + ' px');
  });
  document.querySelectorAll('img').forEach((im, i) => {
    if (!im.complete || im.naturalWidth === 0) problems.push('image ' + i + ' is broken: ' + im.src);
  });
  const figures = document.querySelectorAll('figure');
  let smallest = Infinity;
  figures.forEach((f, i) => {
    const svg = f.querySelector('svg');
    if (!svg) { problems.push('figure ' + i + ' has no drawing'); return; }
    const r = svg.getBoundingClientRect();
    const vb = svg.viewBox && svg.viewBox.baseVal;
    if (r.width === 0 || r.height === 0 || !vb || vb.width === 0) { problems.push('figure ' + i + ' is not drawn'); return; }
    if (r.right > W) problems.push('figure ' + i + ' is wider than the window');
    const scale = r.width / vb.width;
    svg.querySelectorAll('text').forEach(t => {
      if (!t.textContent.trim()) return;
      const px = parseFloat(getComputedStyle(t).fontSize) * scale;
      smallest = Math.min(smallest, px);
      if (px < 12) problems.push('figure ' + i + ': text "' + t.textContent.trim() + '" is ' + px.toFixed(1) + ' px');
    });
  });
  // no element reaches past the viewport's right edge (a table cell scrolled out of its
  // box counts: the reader would not see it without scrolling)
  let wide = 0;
  document.querySelectorAll('body *').forEach(e => {
    const r = e.getBoundingClientRect();
    if (r.width > 0 && r.right > W + 1 && wide++ < 5)
      problems.push('element <' + e.tagName.toLowerCase() + '> "' + (e.textContent || '').trim().slice(0, 40) + '" reaches ' + Math.round(r.right) + ' px in a ' + W + ' px window');
  });
  // the first screen: the answer, then the budget plot, both above the fold
  const H = window.innerHeight;
  const answer = Array.from(document.querySelectorAll('p')).find(p => p.textContent.startsWith('Answer:'));
  const first = figures[0];
  if (!answer) problems.push('no paragraph starts with "Answer:"');
  else if (answer.getBoundingClientRect().bottom > H) problems.push('the answer ends below the first screen');
  if (!first || !/(Tokens\/s|Page-ins per token) vs budget/.test(first.textContent)) problems.push('the first figure is not the budget plot');
  else if (first.querySelector('svg').getBoundingClientRect().bottom > H)
    problems.push('the budget plot ends at ' + Math.round(first.querySelector('svg').getBoundingClientRect().bottom) + ' px, below the first screen of ' + H + ' px');
  const out = document.createElement('pre');
  out.id = 'layout-check';
  out.textContent = JSON.stringify({ window: W, tables: tables.length, figures: figures.length,
    smallest_text_px: smallest === Infinity ? null : smallest, problems: problems.slice(0, 40) });
  document.body.appendChild(out);
})();
</script>
</body>"#;

/// The Chromium binary, or `None` when none is installed.
fn chromium() -> Option<String> {
    let candidates = match std::env::var("CHROMIUM") {
        Ok(c) => vec![c],
        Err(_) => vec!["chromium".to_string(), "chromium-browser".to_string()],
    };
    candidates.into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Whether this is a CI run (`CI` set to anything but empty, `0` or `false`).
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// Load `page` in headless Chromium with a fresh profile and return the dumped DOM.
fn dump_dom(browser: &str, page: &Path, profile: &Path) -> String {
    let o = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            &format!("--user-data-dir={}", profile.display()),
            &format!("--window-size={WINDOW_PX},900"),
            "--dump-dom",
        ])
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium");
    assert!(
        o.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The JSON the check script left in the dumped DOM.
fn check_result(dom: &str) -> serde_json::Value {
    let start = dom
        .find("<pre id=\"layout-check\">")
        .expect("the check script ran (its <pre> is in the DOM)");
    let body = &dom[start + "<pre id=\"layout-check\">".len()..];
    let end = body.find("</pre>").expect("closed <pre>");
    let text = body[..end]
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&text).expect("the check's JSON")
}

#[test]
fn report_fits_a_1400_px_window_in_chromium() {
    let Some(browser) = chromium() else {
        assert!(
            !in_ci(),
            "CI is set but chromium is not installed: install it (`apt-get install -y chromium`, as .ci/run does) or set CHROMIUM=path"
        );
        eprintln!("skipped: chromium is not installed (apt-get install -y chromium); under CI=true this test fails instead");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    // two traces (so the cross-trace table is there), three mechanisms, two budgets and two
    // batch sizes: every section and plot kind of the report
    let o = Command::new(env!("CARGO_BIN_EXE_sim"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args([
            "compare",
            "--trace",
            "traces/data/granite/english_prose.bin",
            "--trace",
            "traces/data/granite/code.bin",
            "--policies",
            "e1,e2:hot,os64k",
            "--evict",
            "lru,static-pin",
            "--budgets",
            "25%,1GiB",
            "--batch",
            "1,4",
            "--hw",
            "rtx4060-laptop-wddm",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_eq!(html.matches("</body>").count(), 1);
    let page = dir.path().join("page.html");
    std::fs::write(&page, html.replace("</body>", CHECK_JS)).unwrap();
    let profile = dir.path().join("chromium-profile");
    let got = check_result(&dump_dom(&browser, &page, &profile));
    eprintln!("layout at {WINDOW_PX} px: {got}");
    assert_eq!(
        got["window"], WINDOW_PX,
        "the window is {WINDOW_PX} px wide: {got}"
    );
    assert!(got["tables"].as_u64().unwrap() >= 10, "{got}");
    assert!(got["figures"].as_u64().unwrap() >= 10, "{got}");
    let problems = got["problems"].as_array().unwrap();
    assert!(
        problems.is_empty(),
        "the report at {WINDOW_PX} px: {problems:#?}"
    );
}
