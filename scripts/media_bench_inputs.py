#!/usr/bin/env python3
# Usage: python3 scripts/media_bench_inputs.py (in the folder to write to). Standard library only.
# Writes the benchmark inputs: a 960x672 RGB PNG (the same picture gem4 bench generates for
# --image-size 960x672) and a 10 s 16 kHz mono 16-bit WAV (the same chirp as --audio-seconds 10).
import math, struct, wave, zlib
w, h = 960, 672
rows = bytearray()
s = 12345
for y in range(h):
    rows.append(0)
    for x in range(w):
        s = (s * 1664525 + 1013904223) & 0xffffffff
        rows += bytes(((x * 255) // (w - 1), (y * 255) // (h - 1), (((x ^ y) & 0x3f) * 2 + (s >> 28)) & 0xff))
def chunk(t, d):
    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
png = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(bytes(rows), 6)) + chunk(b'IEND', b'')
open('img-960x672.png', 'wb').write(png)
n = 10 * 16000
with wave.open('chirp-10s-16k.wav', 'wb') as f:
    f.setnchannels(1); f.setsampwidth(2); f.setframerate(16000)
    f.writeframes(b''.join(struct.pack('<h', int(round(0.3 * math.sin(0.013 * i * (1 + i / 5e5)) * 32767))) for i in range(n)))
