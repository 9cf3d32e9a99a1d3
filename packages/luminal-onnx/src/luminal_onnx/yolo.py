"""YOLOv8 object detection on an imported ONNX export.

The network runs through the importer; the box decoding (centre/size to corners, best class
and its score per anchor) is added to the same luminal graph; only the data-dependent part,
thresholding and non-maximum suppression, runs in NumPy.

    det = Detector.from_onnx("yolov8n-doclaynet.onnx")
    for d in det.detect(image):   # a PIL image or an HxWx3 uint8 RGB array
        print(d.class_name, d.score, d.xyxy)
"""

from __future__ import annotations

import ast
import os
from dataclasses import asdict, dataclass

import luminal as lm
import numpy as np

from .errors import OnnxImportError
from .model import OnnxModel, load

PAD_VALUE = 114  # the grey Ultralytics letterboxes with


@dataclass
class Detection:
    xyxy: list[float]  # corners in the original image's pixels
    class_id: int
    class_name: str
    score: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Letterbox:
    """How an image was fitted into the square network input (to map boxes back)."""

    scale: float
    pad_x: float
    pad_y: float
    width: int
    height: int

    def to_image(self, xyxy: np.ndarray) -> np.ndarray:
        out = xyxy.astype(np.float64).copy()
        out[:, [0, 2]] = (out[:, [0, 2]] - self.pad_x) / self.scale
        out[:, [1, 3]] = (out[:, [1, 3]] - self.pad_y) / self.scale
        out[:, [0, 2]] = out[:, [0, 2]].clip(0, self.width)
        out[:, [1, 3]] = out[:, [1, 3]].clip(0, self.height)
        return out


def letterbox(image, size: int) -> tuple[np.ndarray, Letterbox]:
    """`image` (PIL image or HxWx3 uint8 RGB) resized to fit `size` x `size` keeping its
    aspect ratio, centred on grey: a (1, 3, size, size) float32 batch in [0, 1]."""
    from PIL import Image

    img = image if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image))
    img = img.convert("RGB")
    width, height = img.size
    scale = min(size / width, size / height)
    new_w, new_h = max(1, round(width * scale)), max(1, round(height * scale))
    resized = img.resize((new_w, new_h), Image.Resampling.BILINEAR)
    canvas = Image.new("RGB", (size, size), (PAD_VALUE,) * 3)
    pad_x, pad_y = (size - new_w) // 2, (size - new_h) // 2
    canvas.paste(resized, (pad_x, pad_y))
    batch = np.asarray(canvas, dtype=np.float32).transpose(2, 0, 1)[None] / 255.0
    return np.ascontiguousarray(batch), Letterbox(scale, pad_x, pad_y, width, height)


def decode_head(outputs: dict[str, lm.GraphTensor]) -> dict[str, lm.GraphTensor]:
    """(1, 4 + classes, anchors) -> corner boxes (anchors, 4), best score and class."""
    (raw,) = outputs.values()
    pred = raw[0]
    cx, cy, w, h = pred[0], pred[1], pred[2], pred[3]
    boxes = lm.stack([cx - w * 0.5, cy - h * 0.5, cx + w * 0.5, cy + h * 0.5], 1)
    scores = pred[4:]
    return {"boxes": boxes, "scores": scores.amax(0), "classes": scores.argmax(0)}


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Indices kept by greedy non-maximum suppression, highest score first."""
    order = np.argsort(-scores, kind="stable")
    areas = np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1],
                                                                     0, None)
    keep = []
    while order.size:
        best, rest = order[0], order[1:]
        keep.append(best)
        lo = np.maximum(boxes[best, :2], boxes[rest, :2])
        hi = np.minimum(boxes[best, 2:], boxes[rest, 2:])
        inter = np.prod(np.clip(hi - lo, 0, None), axis=1)
        union = areas[best] + areas[rest] - inter
        iou = inter / np.where(union > 0, union, 1.0)
        order = rest[iou <= iou_threshold]
    return np.asarray(keep, dtype=np.int64)


def select(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, conf: float, iou: float,
           max_det: int = 300) -> np.ndarray:
    """Indices of the final detections: above `conf`, then class-wise NMS at `iou`."""
    candidates = np.flatnonzero(scores > conf)
    # an offset per class keeps boxes of different classes from suppressing each other
    offset = classes[candidates, None].astype(np.float64) * (boxes.max() + 1.0)
    kept = nms(boxes[candidates] + offset, scores[candidates], iou)
    return candidates[kept[:max_det]]


def class_names(model: OnnxModel) -> dict[int, str]:
    """Ultralytics exports store `names` as a Python dict literal in the metadata."""
    raw = model.metadata.get("names")
    if not raw:
        return {}
    try:
        names = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return {}
    return {int(k): str(v) for k, v in names.items()} if isinstance(names, dict) else {}


class Detector:
    """A YOLOv8 detection export (input (1, 3, S, S), output (1, 4 + classes, anchors))."""

    def __init__(self, model: OnnxModel, conf: float = 0.25, iou: float = 0.45,
                 backend: str | None = None) -> None:
        if len(model.input_names) != 1 or len(model.output_names) != 1:
            raise OnnxImportError(f"{model.source}: a YOLOv8 detector has one input and one "
                                  f"output, this model has {model.input_names} and "
                                  f"{model.output_names}")
        shape = next(iter(model.input_shapes().values()))
        if len(shape) != 4 or not isinstance(shape[2], int) or shape[2] != shape[3]:
            raise OnnxImportError(f"{model.source}: expected a square (1, 3, S, S) input, got "
                                  f"{shape}")
        self.model, self.size = model, shape[2]
        self.conf, self.iou, self.backend = conf, iou, backend
        self.names = class_names(model)

    @classmethod
    def from_onnx(cls, path: str | os.PathLike, **kwargs) -> Detector:
        return cls(load(path), **kwargs)

    def raw(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        """Decoded boxes (network pixels), scores and classes of every anchor."""
        return self.model.run({self.model.input_names[0]: batch}, self.backend, decode_head)

    def detect(self, image) -> list[Detection]:
        batch, box = letterbox(image, self.size)
        out = self.raw(batch)
        keep = select(out["boxes"], out["scores"], out["classes"], self.conf, self.iou)
        xyxy = box.to_image(out["boxes"][keep])
        return [Detection([float(v) for v in xyxy[k]], int(out["classes"][i]),
                          self.names.get(int(out["classes"][i]), str(out["classes"][i])),
                          float(out["scores"][i]))
                for k, i in enumerate(keep)]
