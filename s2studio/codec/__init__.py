"""S2 Pro's audio codec (a modified 44.1 kHz DAC), exact to upstream on CPU float32.

- `loading.load_codec(path, device="cpu") -> Codec`, `loading.codec_fingerprint(codec) -> str`
- `Codec.encode(audio (B, 1, N) float32) -> codes (B, 10, ceil(N/2048)) int64`,
  `Codec.decode(codes (B, 10, T)) -> audio (B, 1, 2048·T) float32`
- `streaming.IncrementalDecoder(codec, exact=True).push(codes (10, n)) -> np.float32 (2048·n,)` (`exact=False`:
  `fast_stream.py`'s faster decode, within 1 LSB of a full decode in float32, ~42 dB SNR in bfloat16 where the
  CPU has it)
- `resample.encode_file(codec, path) -> np.int64 (10, T)` (read, mix, resample, encode as upstream)

Submodules are imported explicitly (this package pulls in torch; `s2studio.audio` does not).
"""
