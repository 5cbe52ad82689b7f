"""Frame time of the web page at N nodes, measured in Debian's chromium (headless).

    .venv/bin/python bench/web_frame_time.py [--nodes 1000] [--repeat 50]

The real web server (meshhealth.agent.serving.web_server) serves a synthetic N x N mesh
on 127.0.0.1 (tests/web_browser.py); the page loads it as it loads an agent's. Printed,
in milliseconds of the page's own render() (performance.now() around it):

- first draw: the matrix, the axes and the node list built from scratch;
- redraw: the matrix and axes again, as on every live update from the feed
  (median and p95 over --repeat draws);
- update: one column turns unreachable, the page fetches the matrix again, parses it,
  redraws and rebuilds the node list (what a round brings at most);
- the frame interval the browser keeps while redrawing on every animation frame.

Headless chromium draws with the CPU: a desktop browser with a GPU is not slower.
Figures go to docs/performance.md and docs/ui.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.web_browser import chromium, synthetic_web

VIEWPORT = {"width": 1400, "height": 900}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    with synthetic_web(args.nodes) as url, chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(url)
        page.wait_for_function(
            "() => window.meshhealth.state.matrix && window.meshhealth.state.renders > 0",
            timeout=120_000,
        )
        first = page.evaluate("() => window.meshhealth.frameTimes()[0]")
        redraws = page.evaluate(
            """(n) => { const out = [];
                 for (let i = 0; i < n; i++) {
                   const t = performance.now(); window.meshhealth.render();
                   out.push(performance.now() - t); }
                 return out; }""",
            args.repeat,
        )
        update = page.evaluate(
            """async () => { const S = window.meshhealth.state;
                 const t = performance.now();
                 const m = await (await fetch('v1/web/matrix')).json();
                 for (const r of m.rows) r.states = r.states[0] + 'U' + r.states.slice(2);
                 window.meshhealth.setMatrix(m); window.meshhealth.render();
                 return performance.now() - t; }"""
        )
        frames = page.evaluate(
            """(n) => new Promise((done) => { const stamps = [];
                 const step = (ts) => { stamps.push(ts); window.meshhealth.render();
                   if (stamps.length <= n) requestAnimationFrame(step);
                   else done(stamps.slice(1).map((t, i) => t - stamps[i])); };
                 requestAnimationFrame(step); })""",
            args.repeat,
        )
        cells = page.evaluate("() => window.meshhealth.state.view.cell")
    redraws.sort()
    frames.sort()
    print(f"nodes: {args.nodes} ({args.nodes**2:,} cells, {cells}px per cell)")
    print(f"first draw (matrix + node list): {first:.1f} ms")
    print(
        f"redraw: median {statistics.median(redraws):.1f} ms, "
        f"p95 {redraws[int(0.95 * (len(redraws) - 1))]:.1f} ms, max {redraws[-1]:.1f} ms"
    )
    print(f"update (fetch + parse + redraw + node list): {update:.1f} ms")
    median = statistics.median(frames)
    p95 = frames[int(0.95 * (len(frames) - 1))]
    print(
        f"frame interval while redrawing every frame: median {median:.1f} ms "
        f"(~{1000 / median:.0f} fps), p95 {p95:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
