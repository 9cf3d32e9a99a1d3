"""Draw detections on an image: a coloured box and a "label score" tag per detection."""

from __future__ import annotations

from collections.abc import Sequence

from .yolo import Detection

# distinct, readable colours (Tableau 10), one per class id
PALETTE = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
           (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)]


def annotate(image, detections: Sequence[Detection]):
    """A copy of `image` (PIL) with the detections drawn on it."""
    from PIL import ImageDraw, ImageFont

    out = image.convert("RGB")
    draw = ImageDraw.Draw(out)
    width = max(2, round(max(out.size) / 400))
    font = ImageFont.load_default(size=max(12, round(max(out.size) / 60)))
    for det in detections:
        color = PALETTE[det.class_id % len(PALETTE)]
        x0, y0, x1, y1 = det.xyxy
        draw.rectangle((x0, y0, x1, y1), outline=color, width=width)
        label = f"{det.class_name} {det.score:.2f}"
        left, top, right, bottom = draw.textbbox((0, 0), label, font=font)
        tag_h = bottom - top + 4
        ty = y0 - tag_h if y0 - tag_h >= 0 else y0
        draw.rectangle((x0, ty, x0 + right - left + 6, ty + tag_h), fill=color)
        draw.text((x0 + 3, ty + 2 - top), label, fill=(255, 255, 255), font=font)
    return out
