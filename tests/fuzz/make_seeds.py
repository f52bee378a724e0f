#!/usr/bin/env python3
"""Writes the binary seeds of tests/fuzz/corpus/ (the text seeds are written by hand): tiny
valid files of each format, built byte by byte from the formats' definitions, so the fuzzers
start from inputs that reach deep into each parser, and crash-* inputs that once crashed kvlab,
so every replay checks the fix. Run from anywhere; it rewrites the files.
"""
import json
import math
import random
import struct
from pathlib import Path

corpus = Path(__file__).resolve().parent / "corpus"
rng = random.Random(7)


def write(target, name, data):
    folder = corpus / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


def floats(count, scale=0.1):
    return [rng.uniform(-scale, scale) for _ in range(count)]


def pack(fmt, values):
    return b"".join(struct.pack(fmt, v) for v in values)


def f16(values):
    return pack("<e", values)


def bf16(values):
    return b"".join(struct.pack("<f", v)[2:] for v in values)


# ---- npy ----------------------------------------------------------------------------------------


def npy(descr, shape, data, major=1, fortran=False):
    shape_text = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape_text)
    length_bytes = 2 if major == 1 else 4
    header += " " * (63 - (8 + length_bytes + len(header)) % 64) + "\n"
    length = struct.pack("<H" if major == 1 else "<I", len(header))
    return b"\x93NUMPY" + bytes([major, 0]) + length + header.encode("latin-1") + data


write("npy", "f4_1d.npy", npy("<f4", [5], pack("<f", [1, -2, 0.5, float("inf"), float("nan")])))
write("npy", "f2_big_endian_2d.npy", npy(">f2", [2, 3], pack(">e", floats(6))))
write("npy", "f8_format2_4d.npy", npy("<f8", [1, 2, 2, 2], pack("<d", floats(8)), major=2))
write("npy", "f4_format3.npy", npy("<f4", [3], pack("<f", [3, 2, 1]), major=3))

# ---- safetensors ----------------------------------------------------------------------------------


def safetensors(tensors, metadata=None):
    """tensors: (name, dtype, shape, bytes), laid out in order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


kv, q = [1, 2, 3, 4], [1, 4, 3, 4]
write("safetensors", "f32_kv_dump.safetensors",
      safetensors([("k", "F32", kv, pack("<f", floats(24))), ("q", "F32", q, pack("<f", floats(48))),
                   ("v", "F32", kv, pack("<f", floats(24)))], {"format": "pt"}))
write("safetensors", "f16_bf16_extra.safetensors",
      safetensors([("v", "BF16", kv, bf16(floats(24))), ("k", "F16", kv, f16(floats(24))),
                   ("extra", "I8", [2], b"\x01\x02"), ("q", "F16", q, f16(floats(48)))]))

# ---- GGUF ---------------------------------------------------------------------------------------

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
          I64: "<q", F64: "<d"}
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_Q4_K, GGML_Q6_K, GGML_BF16 = 0, 1, 2, 8, 12, 14, 30


def gguf_string(text):
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def gguf_value(kind, value):
    if kind == STR:
        return gguf_string(value)
    if kind == ARR:
        element, items = value
        return struct.pack("<IQ", element, len(items)) + b"".join(gguf_value(element, item) for item in items)
    return struct.pack(SCALAR[kind], value)


def gguf(metadata, tensors, alignment=32):
    """metadata: (key, type, value); tensors: (name, dims in ggml order, ggml type, bytes)."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, kind, value in metadata:
        out += gguf_string(key) + struct.pack("<I", kind) + gguf_value(kind, value)
    data = b""
    for name, dims, kind, raw in tensors:
        data += b"\0" * (-len(data) % alignment)
        out += gguf_string(name) + struct.pack("<I", len(dims)) + pack("<Q", dims)
        out += struct.pack("<IQ", kind, len(data))
        data += raw
    out += b"\0" * (-len(out) % alignment)
    return out + data


def model_tensors(d, q, kv, ffn, vocab, matrix, bias=False):
    """The tensors of a one-layer model as GGUF names them: matrices as `matrix`, the rest F32."""
    def f32(dims):
        return (dims, GGML_F32, pack("<f", floats(math.prod(dims))))

    def mat(dims):
        return (dims, matrix[0], matrix[1](floats(math.prod(dims))))

    named = [("token_embd.weight", mat([d, vocab])), ("blk.0.attn_norm.weight", f32([d])),
             ("blk.0.attn_q.weight", mat([d, q])), ("blk.0.attn_k.weight", mat([d, kv])),
             ("blk.0.attn_v.weight", mat([d, kv]))]
    if bias:
        named += [("blk.0.attn_q.bias", f32([q])), ("blk.0.attn_k.bias", f32([kv])), ("blk.0.attn_v.bias", f32([kv]))]
    named += [("blk.0.attn_output.weight", mat([q, d])), ("blk.0.ffn_norm.weight", f32([d])),
              ("blk.0.ffn_gate.weight", mat([d, ffn])), ("blk.0.ffn_up.weight", mat([d, ffn])),
              ("blk.0.ffn_down.weight", mat([ffn, d])), ("output_norm.weight", f32([d]))]
    return [(name, *rest) for name, rest in named]


def hyperparameters(arch, d, heads, kv_heads, ffn):
    return [("general.architecture", STR, arch), (arch + ".block_count", U32, 1),
            (arch + ".embedding_length", U32, d), (arch + ".feed_forward_length", U32, ffn),
            (arch + ".attention.head_count", U32, heads), (arch + ".attention.head_count_kv", U32, kv_heads),
            (arch + ".context_length", U32, 64), (arch + ".rope.freq_base", F32, 10000.0),
            (arch + ".attention.layer_norm_rms_epsilon", F32, 1e-5)]


# A Llama with a SentencePiece vocabulary: <unk>, <s>, </s>, byte pieces for a few bytes, words.
spm_pieces = ["<unk>", "<s>", "</s>", "<0x0A>", "<0x20>", "<0xC3>", "\u2581", "a", "b", "ab", "\u2581a",
              "\u2581ab", "\u2581the", "e", "\u00e9", "<|user|>"]
spm_types = [2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4]
spm_scores = [0.0] * 6 + [-1.0, -2.0, -2.0, -1.5, -1.2, -1.1, -0.5, -3.0, -3.0, 0.0]
write("gguf", "llama_f16_sentencepiece.gguf", gguf(
    hyperparameters("llama", 8, 2, 1, 16) + [
        ("tokenizer.ggml.model", STR, "llama"), ("tokenizer.ggml.tokens", ARR, (STR, spm_pieces)),
        ("tokenizer.ggml.scores", ARR, (F32, spm_scores)), ("tokenizer.ggml.token_type", ARR, (I32, spm_types)),
        ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
        ("tokenizer.ggml.unknown_token_id", U32, 0), ("tokenizer.ggml.add_bos_token", BOOL, True)],
    model_tensors(8, 8, 4, 16, len(spm_pieces), (GGML_F16, f16))))


# A Qwen2 (q/k/v biases) with a GPT-2 byte-level vocabulary: the 256 byte characters and merges.
def gpt2_byte_characters():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


byte_pieces = gpt2_byte_characters()
gpt2_merges = ["\u0120 t", "h e", "\u0120t he", "a b", "i t", "\u0120 a"]
gpt2_pieces = byte_pieces + ["\u0120t", "he", "\u0120the", "ab", "it", "\u0120a", "<|endoftext|>"]
write("gguf", "qwen2_bf16_byte_level.gguf", gguf(
    hyperparameters("qwen2", 4, 2, 2, 4) + [
        ("tokenizer.ggml.model", STR, "gpt2"), ("tokenizer.ggml.pre", STR, "qwen2"),
        ("tokenizer.ggml.tokens", ARR, (STR, gpt2_pieces)), ("tokenizer.ggml.merges", ARR, (STR, gpt2_merges)),
        ("tokenizer.ggml.token_type", ARR, (I8, [1] * (len(gpt2_pieces) - 1) + [3])),
        ("tokenizer.ggml.eos_token_id", U32, len(gpt2_pieces) - 1)],
    model_tensors(4, 4, 4, 4, len(gpt2_pieces), (GGML_BF16, bf16), bias=True)))

# A byte-level vocabulary without merges merged by piece score, and it has no scores.
write("gguf", "crash-byte-level-without-merges", gguf(
    [("tokenizer.ggml.model", STR, "gpt2"), ("tokenizer.ggml.tokens", ARR, (STR, byte_pieces + ["ab"]))], []))


# Every dequantizable block type, every metadata value type, nested arrays, alignment 64.
def q4_0(blocks):
    return b"".join(f16([0.05]) + bytes(rng.randrange(256) for _ in range(16)) for _ in range(blocks))


def q8_0(blocks):
    return b"".join(f16([0.01]) + bytes(rng.randrange(256) for _ in range(32)) for _ in range(blocks))


def q4_k(blocks):  # d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
    return b"".join(f16([0.02, 0.01]) + bytes(rng.randrange(256) for _ in range(140)) for _ in range(blocks))


def q6_k(blocks):  # 128 bytes low bits, 64 high bits, 16 int8 scales, d
    return b"".join(bytes(rng.randrange(256) for _ in range(208)) + f16([0.01]) for _ in range(blocks))


write("gguf", "block_types_and_value_types.gguf", gguf(
    [("general.alignment", U32, 64), ("u8", U8, 200), ("i8", I8, -5), ("u16", U16, 60000), ("i16", I16, -300),
     ("i32", I32, -70000), ("f32", F32, 1.5), ("b", BOOL, False), ("u64", U64, 2**63 + 5), ("i64", I64, -2**40),
     ("f64", F64, -0.25), ("strings", ARR, (STR, ["x", "", "\u00e9"])), ("floats", ARR, (F64, [1.0, -2.0])),
     ("nested", ARR, (ARR, [(U8, [1, 2]), (BOOL, [True])]))],
    [("q4_0", [32, 2], GGML_Q4_0, q4_0(2)), ("q8_0", [64], GGML_Q8_0, q8_0(2)), ("q4_k", [256], GGML_Q4_K, q4_k(1)),
     ("q6_k", [256], GGML_Q6_K, q6_k(1)), ("bf16", [3, 1, 1, 1], GGML_BF16, bf16([1, 2, 3])),
     ("f32", [2], GGML_F32, pack("<f", [1, 2])), ("empty", [0, 4], GGML_F16, b"")],
    alignment=64))

# ---- llama2.c -----------------------------------------------------------------------------------


def llama2c_checkpoint(dim, hidden, layers, heads, kv_heads, vocab, seq_len, shared=True):
    head_dim = dim // heads
    kv = kv_heads * head_dim
    per_layer = 2 * dim + 2 * dim * dim + 2 * kv * dim + 3 * hidden * dim
    count = vocab * dim * (1 if shared else 2) + layers * per_layer + dim + seq_len * head_dim
    header = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab if shared else -vocab, seq_len)
    return header + pack("<f", floats(count))


write("llama2c", "shared_classifier.bin", llama2c_checkpoint(8, 16, 1, 2, 1, 8, 4))
# 2147483645 layers of 8589934604 floats wrapped the 64-bit parameter count around to the 16
# floats of this file; the loader then allocated two billion layers.
write("llama2c", "crash-parameter-count-wraps",
      struct.pack("<7i", 2, 1431655764, 2147483645, 1, 1, 24, 1) + bytes(64))
write("llama2c", "own_classifier_two_layers.bin", llama2c_checkpoint(4, 4, 2, 2, 2, 4, 2, shared=False))


def llama2c_tokenizer(pieces):
    """The vocabulary size prefix the fuzz target reads, then tokenizer.bin."""
    out = struct.pack("<H", len(pieces)) + struct.pack("<i", max(len(p.encode()) for p, _ in pieces))
    for piece, score in pieces:
        raw = piece.encode()
        out += struct.pack("<fi", score, len(raw)) + raw
    return out


llama2c_pieces = [("<unk>", 0.0), ("\n<s>\n", 0.0), ("\n</s>\n", 0.0)]
llama2c_pieces += [("<0x%02X>" % b, 0.0) for b in range(256)]
llama2c_pieces += [(" ", -1.0), ("a", -3.0), ("b", -3.0), ("ab", -1.0), (" a", -2.0), ("\u00e9", -4.0)]
write("llama2c_tokenizer", "bytes_and_merges.bin", llama2c_tokenizer(llama2c_pieces))

# ---- Hugging Face -------------------------------------------------------------------------------


def hf_model(model_type, d, heads, kv_heads, ffn, vocab, dtype, extra=None):
    config = {"model_type": model_type, "hidden_size": d, "num_hidden_layers": 1, "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "intermediate_size": ffn, "vocab_size": vocab,
              "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
              "rope_scaling": None, **(extra or {})}
    head_dim = config.get("head_dim", d // heads)
    q, kv = heads * head_dim, kv_heads * head_dim
    encode = {"F32": lambda v: pack("<f", v), "F16": f16, "BF16": bf16}[dtype]
    shapes = [("model.embed_tokens.weight", [vocab, d]), ("model.layers.0.input_layernorm.weight", [d]),
              ("model.layers.0.self_attn.q_proj.weight", [q, d]), ("model.layers.0.self_attn.k_proj.weight", [kv, d]),
              ("model.layers.0.self_attn.v_proj.weight", [kv, d])]
    if model_type == "qwen2" or config.get("attention_bias"):
        shapes += [("model.layers.0.self_attn.%s_proj.bias" % n, [size]) for n, size in (("q", q), ("k", kv), ("v", kv))]
    shapes += [("model.layers.0.self_attn.o_proj.weight", [d, q]),
               ("model.layers.0.post_attention_layernorm.weight", [d]),
               ("model.layers.0.mlp.gate_proj.weight", [ffn, d]), ("model.layers.0.mlp.up_proj.weight", [ffn, d]),
               ("model.layers.0.mlp.down_proj.weight", [d, ffn]), ("model.norm.weight", [d])]
    if not config.get("tie_word_embeddings", model_type == "qwen2"):
        shapes.append(("lm_head.weight", [vocab, d]))
    weights = safetensors([(name, dtype, shape, encode(floats(math.prod(shape)))) for name, shape in shapes])
    return json.dumps(config, indent=1).encode() + b"\0" + weights


write("hf_model", "llama_f16.bin", hf_model("llama", 8, 2, 1, 8, 6, "F16", {"tie_word_embeddings": True}))
write("hf_model", "qwen2_bf16_untied.bin", hf_model("qwen2", 8, 2, 2, 4, 4, "BF16", {"tie_word_embeddings": False}))
write("hf_model", "llama_bias_head_dim.bin",
      hf_model("llama", 4, 1, 1, 4, 4, "F32", {"attention_bias": True, "head_dim": 2, "tie_word_embeddings": True}))
write("hf_model", "config_only.json", json.dumps({"model_type": "llama", "hidden_size": 8}).encode())

added = [{"id": 0, "content": "<unk>", "special": True, "normalized": False},
         {"id": 1, "content": "<s>", "special": True, "normalized": False},
         {"id": 2, "content": "</s>", "special": True, "normalized": False}]
llama_json = {
    "version": "1.0", "added_tokens": added,
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                       {"type": "Replace", "pattern": {"String": " "},
                                                        "content": "\u2581"}]},
    "pre_tokenizer": None,
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                {"Sequence": {"id": "A", "type_id": 0}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True,
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x41>": 3, "\u2581": 4, "a": 5, "b": 6, "\u2581a": 7,
                        "ab": 8, "\u2581ab": 9},
              "merges": [["a", "b"], "\u2581 a", "\u2581a b", "\u2581 ab"]}}
write("hf_tokenizer", "llama_with_config.bin", json.dumps(llama_json).encode() + b"\0" + json.dumps(
    {"bos_token": {"content": "<s>"}, "eos_token": "</s>", "add_bos_token": True}).encode())
metaspace_json = dict(llama_json, normalizer=None,
                      pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "split": False,
                                     "prepend_scheme": "first"})
write("hf_tokenizer", "metaspace.json", json.dumps(metaspace_json).encode())

llama3_regex = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
byte_vocab = {c: i for i, c in enumerate(byte_pieces)}
for piece in ["\u0120t", "he", "\u0120the", "ab"]:
    byte_vocab[piece] = len(byte_vocab)
byte_level_json = {
    "added_tokens": [{"id": len(byte_vocab), "content": "<|begin_of_text|>", "special": True, "normalized": False},
                     {"id": len(byte_vocab) + 1, "content": "<|end_of_text|>", "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": llama3_regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    "model": {"type": "BPE", "ignore_merges": True, "vocab": byte_vocab,
              "merges": ["\u0120 t", "h e", "\u0120t he", "a b"]}}
write("hf_tokenizer", "llama3_byte_level.json", json.dumps(byte_level_json).encode())
