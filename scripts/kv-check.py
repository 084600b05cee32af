#!/usr/bin/env python3
# An independent check of ibp's MiniLM tokenizer and forward pass (testdata/src/kv),
# not part of the tests (it needs numpy): BERT's basic tokenizer and
# WordPiece as Hugging Face's Python code writes them (unicodedata for NFD
# and punctuation), and BertModel's forward pass in float64 numpy, compared
# with an f32 file of `ibp kv-data` on the first and last windows.
#
#   source scripts/env.sh
#   ibp kv-data --dtype f32 -o /tmp/kv-f32.safetensors
#   python3 scripts/kv-check.py "$IBP_DATA_DIR" /tmp/kv-f32.safetensors
#
# Prints the token count (must equal kv-data's) and, per window, layer and
# K|V, the largest absolute difference (f32 rounding: a few 1e-6).
import json, struct, sys, unicodedata, math
import numpy as np
D = sys.argv[1]
vocab = {l.rstrip('\n'): i for i, l in reversed(list(enumerate(open(D+'/minilm-vocab.txt', encoding='utf-8'))))}
def is_ws(c): return c in ' \t\n\r' or unicodedata.category(c) == 'Zs'
def is_ctrl(c): return False if c in '\t\n\r' else unicodedata.category(c).startswith('C')
def is_punc(c):
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126: return True
    return unicodedata.category(c).startswith('P')
def basic(text):
    text = ''.join(' ' if is_ws(c) else c for c in text if not (ord(c) == 0 or ord(c) == 0xfffd or is_ctrl(c)))
    out = []
    for tok in text.strip().split():
        tok = tok.lower()
        tok = ''.join(c for c in unicodedata.normalize('NFD', tok) if unicodedata.category(c) != 'Mn')
        cur = ''
        for c in tok:
            if is_punc(c):
                if cur: out.append(cur); cur = ''
                out.append(c)
            else: cur += c
        if cur: out.append(cur)
    return out
def wp(w):
    if len(w) > 100: return [vocab['[UNK]']]
    ids, s = [], 0
    while s < len(w):
        e, cur = len(w), None
        while s < e:
            p = w[s:e] if s == 0 else '##' + w[s:e]
            if p in vocab: cur = vocab[p]; break
            e -= 1
        if cur is None: return [vocab['[UNK]']]
        ids.append(cur); s = e
    return ids
text = open(D+'/minilm-card.md', encoding='utf-8').read()
ids = [i for w in basic(text) for i in wp(w)]
wins = [ids[i:i+254] for i in range(0, len(ids), 254)]
tokens = sum(len(w)+2 for w in wins)
print('python tokens', tokens, 'windows', len(wins))
f = open(D+'/model.safetensors', 'rb'); n = struct.unpack('<Q', f.read(8))[0]; h = json.loads(f.read(n)); base = 8 + n
def T(name):
    m = h[name]; a, b = m['data_offsets']; f.seek(base + a)
    return np.frombuffer(f.read(b - a), dtype='<f4').reshape(m['shape']).astype(np.float64)
def ln(x, p): 
    mu = x.mean(-1, keepdims=True); var = ((x-mu)**2).mean(-1, keepdims=True)
    return (x-mu)/np.sqrt(var+1e-12)*T(p+'.weight')+T(p+'.bias')
def lin(x, p): return x @ T(p+'.weight').T + T(p+'.bias')
from math import erf
verf = np.vectorize(erf)
kv = open(sys.argv[2], 'rb'); kn = struct.unpack('<Q', kv.read(8))[0]; kh = json.loads(kv.read(kn)); kbase = 8 + kn
worst = 0.0
if int(kh['__metadata__']['tokens']) != tokens:
    sys.exit(f"token counts differ: kv-data {kh['__metadata__']['tokens']}, python {tokens}")
for wi in [0, len(wins)-1]:
    w = [101] + wins[wi] + [102]; n_ = len(w); off = sum(len(x)+2 for x in wins[:wi])
    x = T('embeddings.word_embeddings.weight')[w] + T('embeddings.position_embeddings.weight')[:n_] + T('embeddings.token_type_embeddings.weight')[0]
    x = ln(x, 'embeddings.LayerNorm')
    for l in range(6):
        p = f'encoder.layer.{l}.'
        q, k, v = (lin(x, p+'attention.self.'+t) for t in ('query', 'key', 'value'))
        for nm, ref in (('key', k), ('value', v)):
            m = kh[f'layer.{l}.{nm}']; a, _ = m['data_offsets']; kv.seek(kbase + a + off*384*4)
            got = np.frombuffer(kv.read(n_*384*4), dtype='<f4').reshape(n_, 384)
            worst = max(worst, float(np.abs(got-ref).max()))
            print(f'window {wi} layer {l} {nm}: max abs diff {np.abs(got-ref).max():.2e}, max |ref| {np.abs(ref).max():.2f}')
        qh, kh_, vh = (t.reshape(n_, 12, 32).transpose(1, 0, 2) for t in (q, k, v))
        s = qh @ kh_.transpose(0, 2, 1) / math.sqrt(32); s = np.exp(s - s.max(-1, keepdims=True)); s /= s.sum(-1, keepdims=True)
        ctx = (s @ vh).transpose(1, 0, 2).reshape(n_, 384)
        x = ln(x + lin(ctx, p+'attention.output.dense'), p+'attention.output.LayerNorm')
        hh = lin(x, p+'intermediate.dense'); hh = 0.5*hh*(1+verf(hh/math.sqrt(2)))
        x = ln(x + lin(hh, p+'output.dense'), p+'output.LayerNorm')
print('worst difference', worst)
sys.exit(0 if worst < 1e-4 else 1)
