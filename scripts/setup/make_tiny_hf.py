#!/usr/bin/env python3
"""Write a tiny Llama model directory (Hugging Face layout) with random weights, for tests.

Runs in the vLLM venv (needs torch, transformers, tokenizers). No download.

Tokenizer: a byte-level BPE trained here on English word lists, so that every word loadgen's
synthetic prompts use is one token (with or without its leading space), any other text still
encodes (bytes, never one [UNK] for everything: distinct prompts stay distinct, so vLLM's prefix
cache sees what it would with a real tokenizer), plus <s>, </s> and the chat markers.

Model: LlamaForCausalLM, hidden 256, 4 heads (head_dim 64: vLLM's CPU attention refuses 16),
2 KV heads, 2 layers, bf16 safetensors. The weights are random but shaped so that the model
(practically) only ever picks ASCII word tokens with a leading space: every token's embedding has
a large constant in dimension 0, the layers add only small updates, so after the final RMSNorm
dimension 0 dominates and column 0 of lm_head acts as a per-token logit bias. So every generated
token decodes to text on its own, and never to half a UTF-8 sequence the server would hold back.

Usage: make_tiny_hf.py OUT_DIR [--seed 0]
"""
import argparse
import json
import os
import random

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM

# loadgen's synthetic-prompt words (tools/loadgen/src/workload/prompts.rs, VOCAB): each must be 1 token.
LOADGEN_WORDS = """
the of and to in is that for it as was with be by on not he this are or his from at which but
have an had they you were their one all we can her has there been if more when will would who so
no time people year new first world state city water house school day night home light small
large long little good great old young high low work life hand part place case week company
system program question number group problem fact money story month book eye job word business
side kind head power war family music market river tree road table window door paper game song
""".split()

# More common words, so generated text and hand-written prompts are mostly whole-word tokens.
MORE_WORDS = """
about after again air also always another answer any around ask away back because before begin
below between big both boy bring build call came car carry change child children close come
could country cut different does down draw each earth end enough even every example far farm
father feel few find follow food form found four friend get girl give go green grow hard hear
help here him how idea important just keep know land last later learn leave left let line list
live look made make man many may me mean men might mile mind miss most mother mountain move much
must my name near need never next now off often once only open other our out over own page
picture plant play point put read real right run said same saw say sea second see seem sentence
set should show simple since sound spell stand start still stop study such sun take talk tell
than them then these thing think those thought three through together too took try turn two
under until up us use very walk want watch way well went what where while white why without
write your function number returns iteratively docstring doctests explain engineer hash map
lookup average worst short poem eight lines about lighthouse keeper last before automated
return object describing three fictional books each title author list genres output only json
python step arithmetic final answer own
""".split()

SPECIALS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tokenizer(seed):
    words = sorted(set(LOADGEN_WORDS + MORE_WORDS))
    rng = random.Random(seed)
    # Every word at a line start (no leading space) and inside a line (with one), many times, so
    # training merges each all the way into one token.
    corpus = []
    for _ in range(20):
        rng.shuffle(words)
        corpus.extend(words)
        corpus.append(" ".join(words))
    corpus.append("0 1 2 3 4 5 6 7 8 9 . , ; : ? ! ( ) [ ] { } \" ' - + * / = _ n-th O(1) O(n)")

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=8192,
        min_frequency=1,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    for w in LOADGEN_WORDS:
        for form in (w, " " + w):
            n = len(tok.encode(form, add_special_tokens=False).ids)
            if n != 1:
                raise SystemExit(f"make_tiny_hf.py: {form!r} is {n} tokens, not 1")
    return tok


def word_token_ids(tok):
    """Tokens that decode to a space and ASCII letters: the only ones the model should pick."""
    good = []
    for t, i in tok.get_vocab().items():
        if t.startswith("\u0120") and len(t) > 2 and t[1:].isascii() and t[1:].isalpha():
            good.append(i)
    return sorted(good)


def build_model(tok, seed):
    torch.manual_seed(seed)
    vocab = tok.get_vocab_size()
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"),
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg)
    good = torch.tensor(word_token_ids(tok))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02)
        emb = model.model.embed_tokens.weight
        emb[:, 0] = 1.0
        head = model.lm_head.weight
        head.normal_(0.0, 0.5)
        head[:, 0] = -2.0
        head[good, 0] = 2.0
    return model.to(torch.bfloat16), len(good)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tok = build_tokenizer(a.seed)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "add_bos_token": True,
                "model_max_length": 4096,
                "chat_template": CHAT_TEMPLATE,
            },
            f,
            indent=1,
        )
    model, n_good = build_model(tok, a.seed)
    model.save_pretrained(a.out, safe_serialization=True)
    print(
        f"make_tiny_hf.py: wrote {a.out}: vocab {tok.get_vocab_size()} ({n_good} word tokens), "
        f"{sum(p.numel() for p in model.parameters())} parameters"
    )


if __name__ == "__main__":
    main()
