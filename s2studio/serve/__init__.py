"""`s2studio serve`: the studio's engine and voice library behind HTTP (design.md §10).

OpenAI's `POST /v1/audio/speech` (chat front ends), Fish's `POST /v1/tts` (Fish's SDK and clients), and the
studio's own event stream (`POST /v1/s2studio/generate`, what `engine/remote.py` speaks to render a studio
project on another machine). One engine thread, one bounded FIFO queue, a disconnect cancels its job.
"""
