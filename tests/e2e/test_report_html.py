"""report.html: written with every output, self-contained, and rendered by a
real browser. The page is opened in Debian's headless Chromium (installed by
`make tools`, a prerequisite of `make test`) through the DevTools protocol
over a pipe: every resource load is recorded, every <img> is asked whether it
decoded, and a full-page screenshot is held to what it must show (charts with
many colours, thumbnails that are not flat). `tfrecords report OUT` rebuilds
the page from a local or gs:// output."""
from __future__ import annotations

import base64
import io
import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time

import pytest
from PIL import Image

from conftest import convert, image_bytes, make_tree, manifest, write
from gcs_emulator import BUCKET, bucket, gcs, list_names  # noqa: F401 (fixture)

CHROMIUM = "chromium"
HOSTILE = "<img src=x onerror=alert(1)>.jpg"  # a file name that is markup


# ---- a headless Chromium, driven over the DevTools protocol --------------------------------------------------------


class Browser:
    """Chromium with --remote-debugging-pipe: commands go in on fd 3, answers
    and events come out on fd 4, as NUL-terminated JSON."""

    def __init__(self, width: int = 1280, height: int = 900):
        exe = shutil.which(CHROMIUM)
        assert exe, ("Debian's chromium is not installed: `make tools` installs it (apt-get install chromium); "
                     "`make test` runs that first")
        self._profile = tempfile.mkdtemp(prefix="chromium-profile-")
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()

        def fds():  # in the child: its fds 3 and 4 are the pipe ends Chromium expects
            os.dup2(cmd_r, 3)
            os.dup2(out_w, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
             "--hide-scrollbars", "--mute-audio", f"--user-data-dir={self._profile}", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(out_w)
        self._buf = b""
        self._id = 0
        self.events: list = []
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=True)
        self.send("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            assert left > 0, "chromium did not answer in time"
            ready, _, _ = select.select([self._out_r], [], [], left)
            if ready:
                chunk = os.read(self._out_r, 1 << 20)
                assert chunk, f"chromium closed its pipe (exit {self.proc.poll()})"
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, session: bool = False, timeout: float = 60, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            got = self._read(deadline)
            if got.get("id") == self._id:
                assert "error" not in got, (method, got["error"])
                return got.get("result", {})
            self.events.append(got)

    def wait_for(self, event: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        for e in self.events:
            if e.get("method") == event:
                return e
        while True:
            got = self._read(deadline)
            self.events.append(got)
            if got.get("method") == event:
                return got

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except Exception:  # it may close the pipe before answering
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        os.close(self._out_r)
        shutil.rmtree(self._profile, ignore_errors=True)


_IMAGES_JS = """JSON.stringify([...document.images].map(i => {
  const r = i.getBoundingClientRect();
  return {cls: i.className, alt: i.alt, complete: i.complete, w: i.naturalWidth, h: i.naturalHeight,
          x: r.left + window.scrollX, y: r.top + window.scrollY, width: r.width, height: r.height};
}))"""


def render(path: str) -> dict:
    """Opens a local HTML file in headless Chromium: {"images": [...],
    "requests": [urls], "failed": [...], "errors": [...], "screenshot": PIL image, "text": body text}."""
    b = Browser()
    try:
        url = "file://" + os.path.abspath(path)
        b.send("Page.navigate", session=True, url=url)
        b.wait_for("Page.loadEventFired")
        images = json.loads(b.send("Runtime.evaluate", session=True, expression=_IMAGES_JS,
                                   returnByValue=True)["result"]["value"])
        text = b.send("Runtime.evaluate", session=True, expression="document.body.innerText",
                      returnByValue=True)["result"]["value"]
        size = b.send("Page.getLayoutMetrics", session=True)["cssContentSize"]
        shot = b.send("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True,
                      clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        events = list(b.events)
    finally:
        b.close()
    requests = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
    failed = [e["params"] for e in events if e.get("method") == "Network.loadingFailed"]
    errors = [e["params"] for e in events if e.get("method") in ("Runtime.exceptionThrown",)]
    errors += [e["params"]["entry"] for e in events
               if e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") == "error"]
    return {"images": images, "requests": requests, "failed": failed, "errors": errors, "text": text,
            "screenshot": Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")}


def elements(page: str) -> list:
    """[(tag, [(attribute, value)])] of every element, as an HTML parser sees them."""
    from html.parser import HTMLParser
    out = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            out.append((tag, [(k, v or "") for k, v in attrs]))

    Collect().feed(page)
    return out


def colours(im: Image.Image) -> int:
    return len(im.getcolors(maxcolors=1 << 20) or []) or (1 << 20)


def problems(page: dict, url: str) -> list:
    """What is wrong with a rendered page: loads other than the page itself
    and data: URIs, failed loads, errors, images that did not decode, a blank
    screenshot. Empty when the page rendered completely."""
    out = []
    out += [f"external load {u[:80]}" for u in page["requests"] if not (u.startswith("data:") or u == url)]
    out += [f"failed load {f.get('errorText')} {f.get('blockedReason', '')}" for f in page["failed"]]
    out += [f"error {str(e)[:200]}" for e in page["errors"]]
    out += [f"image {i['alt']!r} did not load" for i in page["images"] if not (i["complete"] and i["w"] > 0)]
    if colours(page["screenshot"]) < 500:
        out.append(f"the page is nearly blank ({colours(page['screenshot'])} colours)")
    return out


def crop(page: dict, img: dict) -> Image.Image:
    box = (int(img["x"]), int(img["y"]), int(img["x"] + img["width"]), int(img["y"] + img["height"]))
    return page["screenshot"].crop(box)


def assert_renders(path: str, min_charts: int, min_thumbs: int) -> dict:
    """The page rendered completely, with its charts and thumbnails drawn."""
    page = render(path)
    assert problems(page, "file://" + os.path.abspath(path)) == []
    charts = [i for i in page["images"] if i["cls"] == "chart"]
    thumbs = [i for i in page["images"] if i["cls"] == "thumb"]
    assert len(charts) >= min_charts and len(thumbs) >= min_thumbs, (len(charts), len(thumbs))
    shot = page["screenshot"]
    for c in charts:
        assert c["width"] > 200 and c["height"] > 80, c
        region = crop(page, c)
        # A drawn chart: axes, labels and coloured bars; not a flat box.
        assert colours(region) >= 30, (c["alt"], colours(region))
        nonwhite = sum(n for n, rgb in region.getcolors(1 << 20) if min(rgb) < 235)
        assert nonwhite > 0.02 * region.width * region.height, c["alt"]
    for t in thumbs:
        region = crop(page, t)
        assert region.width >= 100 and region.height >= 100, t
        assert colours(region) >= 50, (t["alt"], colours(region))  # the noisy test images, not a grey box
    assert shot.width >= 1000 and shot.height > 2000
    return page


# ---- a converted dataset with rejects and duplicates ---------------------------------------------------------------


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    base = tmp_path_factory.mktemp("report")
    root = str(base / "images")
    make_tree(root, per_class=6)
    write(os.path.join(root, "cat", "cut.jpg"), image_bytes(40, 30, seed=7)[:300])  # truncated: no preview
    write(os.path.join(root, "dog", "notes.jpg"), b"just text")                     # not an image
    write(os.path.join(root, "bird", "big.bmp"), image_bytes(30, 20, fmt="BMP", seed=8))  # unsupported: previewable
    with open(os.path.join(root, "cat", "2.jpg"), "rb") as f:
        write(os.path.join(root, "dog", "copy_of_cat.jpg"), f.read())  # a duplicate with another label
    write(os.path.join(root, "bird", HOSTILE), image_bytes(20, 20, seed=9))
    out = str(base / "out")
    assert convert("--input", root, "--output", out, "--split", "train=0.7,validation=0.3",
                   "--max_reject_fraction", "1") == 0
    return root, out


def test_every_output_gets_a_report_that_the_manifest_notes(output):
    _, out = output
    m = manifest(out)
    assert m["report"]["file"] == "report.html" and "error" not in m["report"]
    page = open(os.path.join(out, "report.html"), encoding="utf-8").read()
    assert page.startswith("<!DOCTYPE html>")
    for section in ("Summary", "Class balance", "Samples", "Rejects", "Duplicates and near duplicates",
                    "Image sizes"):
        assert f"<h2>{section}</h2>" in page, section
    c = m["counts"]
    assert f"listed <b>{c['listed']:,}</b> = written <b>{c['written']:,}</b> + rejected <b>{c['rejected']:,}</b>" \
        in page
    # Each reject appears with its reason; the duplicate pair with both files.
    for r in open(os.path.join(out, "rejects.jsonl"), encoding="utf-8"):
        r = json.loads(r)
        assert r["path"] in page and f"<code>{r['reason']}</code>" in page, r
    assert m["quality"]["duplicates"]["conflicting_labels"] == 1
    assert "cat/2.jpg" in page and "dog/copy_of_cat.jpg" in page


def test_the_report_is_self_contained_and_escapes_what_it_shows(output):
    _, out = output
    page = open(os.path.join(out, "report.html"), encoding="utf-8").read()
    tags = elements(page)
    links = [(t, k, v) for t, attrs in tags for k, v in attrs if k in ("src", "href", "srcset", "action", "data")]
    assert links and all(v.startswith("data:image/") for _, _, v in links), [x[:60] for x in map(str, links)
                                                                            if "data:image/" not in x]
    assert not re.search(r"https?://", page)  # no URL anywhere, not even in the CSS
    assert ("meta", [("http-equiv", "Content-Security-Policy"),
                     ("content", "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
                                 "form-action 'none'; base-uri 'none'")]) in tags
    assert not [t for t, _ in tags if t in ("script", "link", "iframe", "object", "embed")]
    assert not [(t, k) for t, attrs in tags for k, _ in attrs if k.startswith("on")]  # no event handlers
    # The file named as markup is shown as text, never as an element.
    assert HOSTILE not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_the_report_renders_in_headless_chromium(output):
    _, out = output
    m = manifest(out)
    page = assert_renders(os.path.join(out, "report.html"), min_charts=3, min_thumbs=3 * 4 + 2)
    thumbs = [i for i in page["images"] if i["cls"] == "thumb"]
    # Contact sheet: every class has a row; the previewable reject (a BMP) and the duplicate pair have thumbnails.
    for name in m["label_map"]["classes"]:
        assert name in page["text"]
    assert any(t["alt"] == "bird/big.bmp" for t in thumbs)
    assert {"cat/2.jpg", "dog/copy_of_cat.jpg"} <= {t["alt"] for t in thumbs}
    assert "no preview" in page["text"]  # the truncated JPEG and the text file have none
    assert any(t["alt"] == "bird/" + HOSTILE for t in thumbs)  # decoded, and its name did not become markup


def test_the_browser_check_catches_a_broken_page(tmp_path):
    """The checks above can fail: a page with a missing image, an external
    URL and nothing drawn is caught on each count."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><img class="chart" alt="gone" src="missing.png">'
                   '<img class="thumb" alt="far" src="http://127.0.0.1:9/x.png"></body></html>')
    page = render(str(bad))
    found = "\n".join(problems(page, "file://" + str(bad)))
    assert "did not load" in found and "external load http://127.0.0.1:9/x.png" in found
    assert "failed load" in found and "nearly blank" in found


def test_tfrecords_report_rebuilds_the_page_locally(output, capsys):
    from tfrecord_pipelines.cli import main as cli
    root, out = output
    path = os.path.join(out, "report.html")
    before = open(path, encoding="utf-8").read()
    os.remove(path)
    with pytest.raises(SystemExit) as e:
        cli(["report", out, "--sources", root])
    assert e.value.code == 0
    assert "wrote " + path in capsys.readouterr().out
    after = open(path, encoding="utf-8").read()
    # With the input folder named: the same figures and thumbnails as the page the conversion wrote.
    assert after.count('class="thumb"') == before.count('class="thumb"')
    assert after.count('class="chart"') == before.count('class="chart"')
    # Without it, no input file is read: the reject that only its source file could show has no thumbnail.
    with pytest.raises(SystemExit) as e:
        cli(["report", out])
    assert e.value.code == 0
    bare = open(path, encoding="utf-8").read()
    assert 'alt="bird/big.bmp"' in after and 'alt="bird/big.bmp"' not in bare and "--sources DIR" in bare
    assert bare.count('class="chart"') == before.count('class="chart"')
    elsewhere = os.path.join(os.path.dirname(out), "elsewhere", "r.html")
    with pytest.raises(SystemExit) as e:
        cli(["report", out, "--to", elsewhere])
    assert e.value.code == 0 and os.path.getsize(elsewhere) > 10_000
    with pytest.raises(SystemExit) as e:
        cli(["report", os.path.dirname(out)])  # no manifest there
    assert e.value.code == 1 and "no manifest.json" in capsys.readouterr().err


def test_tfrecords_report_on_a_bucket(gcs, output, tmp_path):
    from tfrecord_pipelines.commands.report import main as report
    root, _ = output
    out = f"gs://{BUCKET}/reported"
    assert convert("--input", root, "--output", out, "--max_reject_fraction", "1") == 0
    assert "report.html" in list_names("reported")
    bucket().blob("reported/report.html").delete()
    assert report([out]) == 0
    local = tmp_path / "report.html"
    bucket().blob("reported/report.html").download_to_filename(str(local))
    assert_renders(str(local), min_charts=3, min_thumbs=3 * 4)


def test_a_report_that_cannot_be_built_does_not_fail_the_publish(tree, tmp_path, monkeypatch):
    from tfrecord_pipelines.transforms.core import report_html
    root, labels = tree
    out = str(tmp_path / "out")
    os.makedirs(out)
    with open(os.path.join(out, "report.html"), "w") as f:
        f.write("an earlier run's report")

    def broken(*a, **k):
        raise RuntimeError("planted failure")

    monkeypatch.setattr(report_html, "build_html", broken)
    assert convert("--input", root, "--output", out, "--overwrite") == 0
    m = manifest(out)
    assert m["report"]["file"] is None and "planted failure" in m["report"]["error"]
    assert not os.path.exists(os.path.join(out, "report.html"))  # not the stale one either
    assert m["counts"]["written"] == len(labels)


def test_an_older_manifest_without_quality_figures_still_gets_a_report(output, tmp_path):
    """Manifests written before the quality section: the page says so, and
    its size charts come from the sampled records."""
    from tfrecord_pipelines.transforms.storage import report_data
    _, out = output
    old = tmp_path / "old"
    shutil.copytree(out, old)
    m = manifest(str(old))
    del m["quality"], m["report"]
    page = report_data.build(str(old), m)
    assert "no quality figures" in page and "sampled records" in page
    (old / "report.html").write_text(page, encoding="utf-8")
    assert_renders(str(old / "report.html"), min_charts=3, min_thumbs=3 * 4)


def test_many_classes_make_one_curve_per_split_and_a_capped_contact_sheet(tmp_path):
    """A 1,000-class manifest: the class chart is a sorted curve per split, the
    page stays small, and it renders."""
    from tfrecord_pipelines.transforms.core import report_html
    from tfrecord_pipelines.transforms.core.report_html import ReportInputs, Sample, thumbnail
    classes = {f"class_{i:04d}": i for i in range(1000)}
    per_split = {"train": {c: 50 + i % 37 for c, i in classes.items()},
                 "validation": {c: 5 + i % 7 for c, i in classes.items() if i % 10}}
    m = {"counts": {"listed": 60_000, "written": 59_990, "rejected": 10, "not_selected": 0},
         "rejects_by_reason": {"corrupt": 10}, "label_map": {"kind": "class", "classes": classes},
         "splits": {s: {"records": sum(c.values()), "label_counts": c, "num_shards": 4, "bytes": 1, "shards": []}
                    for s, c in per_split.items()},
         "quality": {"balance": {"per_split": per_split, "missing_from_train": {}, "min_count": 1,
                                 "below_min": {"validation": [c for c, i in classes.items() if not i % 10]}}}}
    thumb = thumbnail(image_bytes(64, 48, seed=3))
    inputs = ReportInputs(samples=[Sample(f"class_{i:04d}", "train", f"class_{i:04d}/{k}.jpg", thumb)
                                   for i in range(24) for k in range(4)])
    started = time.monotonic()
    page = report_html.build_html(m, inputs)
    built = time.monotonic() - started
    assert len(page) < 2_000_000, len(page)
    assert "... (100 in all)" in page  # the 100 classes missing from validation: listed up to a cap
    path = tmp_path / "many.html"
    path.write_text(page, encoding="utf-8")
    assert_renders(str(path), min_charts=2, min_thumbs=96)
    print(f"1,000-class page built in {built:.2f} s, {len(page) / 1e3:.0f} KB")


# ---- labels in the chart library's math syntax; the time bound ----------------------------------------------------

MATH_NAMES = ["$$", "$100_$200", "a_$b^c$", "\\frac{1}{2}", "$x"]


def test_class_names_in_math_syntax_keep_the_report(tmp_path):
    """matplotlib parses "$...$" as math: "$$" failed the whole page and
    "$100_$200" drew a subscript. Labels are drawn as the text they are."""
    root = str(tmp_path / "images")
    for i, name in enumerate(MATH_NAMES):
        for j in range(3):
            write(os.path.join(root, name, f"{j}.jpg"), image_bytes(48, 32, seed=10 * i + j))
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out) == 0
    m = manifest(out)
    assert m["report"]["file"] == "report.html", m["report"]
    assert set(m["label_map"]["classes"]) == set(MATH_NAMES)
    page = assert_renders(os.path.join(out, "report.html"), min_charts=2, min_thumbs=len(MATH_NAMES) * 3)
    for name in MATH_NAMES:
        assert name in page["text"], name


def test_a_report_failure_is_said_on_the_console(tree, tmp_path, monkeypatch, capfd):
    from tfrecord_pipelines.transforms.core import report_html
    root, _ = tree

    def broken(*a, **k):
        raise ValueError("planted failure")

    monkeypatch.setattr(report_html, "build_html", broken)
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out) == 0
    err = capfd.readouterr().err
    assert "report.html was not written" in err and "planted failure" in err, err


def _slow_progressive(scans: int, w: int, h: int, seed: int) -> bytes:
    """A progressive JPEG whose last scan is repeated: each scan is another pass over the image."""
    data = image_bytes(w, h, seed=seed, progressive=True)
    sos = [m.start() for m in re.finditer(rb"\xff\xda", data)]
    return data[:len(data) - 2] + data[sos[-1]:len(data) - 2] * (scans - len(sos)) + b"\xff\xd9"


def test_thumbnails_are_bounded_before_decoding():
    from tfrecord_pipelines.transforms.core.report_html import thumbnail
    started = time.monotonic()
    assert thumbnail(_slow_progressive(6000, 64, 48, 1)) == b""   # over validation's 200 scans
    assert thumbnail(_slow_progressive(150, 1600, 1200, 2)) == b""  # 150 scans of 1.9 MP: ~8 s of decoding
    assert time.monotonic() - started < 2.0
    assert thumbnail(image_bytes(1600, 1200, progressive=True)) != b""  # a real progressive photo


def test_a_decode_cut_by_the_deadline_is_counted_late_not_as_bad_bytes():
    """Whatever the machine's speed: a decode its stop cuts, and a file not
    read because the deadline had passed, are thumbnails not made by the
    deadline (the page says how many), where bad bytes are just no preview."""
    from tfrecord_pipelines.transforms.core.report_html import ReportInputs, ShownReject, Stopped, thumbnail
    from tfrecord_pipelines.transforms.storage import report_data
    slow = _slow_progressive(100, 1600, 1200, 3)
    with pytest.raises(Stopped):
        thumbnail(slow, 96, lambda: True)
    assert thumbnail(b"not an image", 96, lambda: False) == b""  # bad bytes: no preview, not late
    budget = report_data.Budget(0.0)
    time.sleep(0.01)
    inputs = ReportInputs(rejects=[ShownReject("a.jpg", "unknown_label", "", "train",
                                               budget.later(thumbnail, slow, 96, budget.out_of_time)),
                                   ShownReject("b.jpg", "unknown_label", "", "train",
                                               report_data.file_thumbnail(__file__, budget))])
    budget.resolve(inputs)
    assert budget.late == 2 and [r.thumb for r in inputs.rejects] == [b"", b""]
    assert "2 thumbnails not made by the 0 s deadline" in budget.summary()


def test_the_deadline_holds_while_thumbnails_are_decoding(tmp_path, capsys):
    """Rejected files (unknown labels: previewable) that take seconds each to
    decode, under the per-image cap: `tfrecords report --deadline` returns
    by its deadline (0.5 s here), the page says what was cut and where the time went."""
    from tfrecord_pipelines.commands.report import main as report_main
    from tfrecord_pipelines.transforms.storage import report_data
    root = str(tmp_path / "images")
    make_tree(root, per_class=2)
    # 100 scans of 1600x1200 (under the thumbnails' cap of 200 M scan pixels,
    # and of 32 MB a source file): ~1 s each at a reduced scale on a quiet
    # machine; the page shows three of a reason, ~1.5 s on two cores, three
    # times the 0.5 s deadline.
    first = os.path.join(root, "zz_new", "0.jpg")
    write(first, _slow_progressive(100, 1600, 1200, 20))
    for i in range(1, 3):
        os.link(first, os.path.join(root, "zz_new", f"{i}.jpg"))
    with open(str(tmp_path / "map.json"), "w") as f:
        json.dump({"cat": 0, "dog": 1, "bird": 2}, f)
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--label_map", str(tmp_path / "map.json"),
                   "--max_reject_fraction", "1", "--validate", "header") == 0
    assert {r["reason"] for r in map(json.loads, open(os.path.join(out, "rejects.jsonl")))} == {"unknown_label"}
    capsys.readouterr()
    started = time.monotonic()
    assert report_main([out, "--deadline", "0.5", "--sources", root]) == 0  # the rejected files are read there
    took = time.monotonic() - started
    printed = capsys.readouterr().out
    waited = float(re.search(r"waiting for thumbnails ([0-9.]+) s", printed).group(1))
    # The decodes stop at the deadline, mid-file: uncut, three ~1 s decodes on two
    # cores are ~2 s of waiting; cut, at most the 0.5 s and the time to notice.
    # (What came before the thumbnails is not bounded here: a busy machine slows it.)
    assert waited < 1.2, printed
    assert took < 0.5 + 8.0, took  # and drawing the page after it (~1 s on a quiet machine)
    assert "not made by the 0.5 s deadline" in printed and "waiting for thumbnails" in printed, printed
    with open(os.path.join(out, report_data.REPORT), encoding="utf-8") as f:
        assert "deadline" in f.read()


def test_the_progress_line_says_the_report_is_being_built(tmp_path, monkeypatch):
    from tfrecord_pipelines.console.progress_line import ProgressLine
    from tfrecord_pipelines.transforms.core.errors import NOTES_ENV
    from tfrecord_pipelines.transforms.storage import progress
    folder = str(tmp_path / "run")
    os.makedirs(folder)
    monkeypatch.setenv(NOTES_ENV, folder)
    line = ProgressLine(folder, "on", str(tmp_path), 120.0)
    progress.Progress(folder, "write").add(10, 1000)
    progress.Progress(folder, "write").flush(force=True)
    assert "report.html" not in line.line()
    progress.mark_stage("report")
    assert "building report.html" in line.line() and "reading" not in line.line()
