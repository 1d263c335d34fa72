#!/usr/bin/python3
"""Makes tests/data/tiny-safety-checker: a tiny random SD safety checker and its goldens.

    /usr/bin/python3 tools/goldens/make_tiny_safety_checker.py tests/data/tiny-safety-checker \
        [--tiny-sd tests/data/tiny-sd] [--diffusers /work/diffusers-v0.31.0] [--shared-tools /work/shared/tools]

transformers is not available offline, so the CLIP vision tower is our torch reference
(clip_vision_reference.py, beside this script). Its encoder layers are first checked against
transformers' own CLIPTextModel output (the tiny-sd text-encoder goldens, causal mask on); the
scoring — visual_projection, cosine distances, thresholds, special-care adjustment, flags — is
diffusers v0.31.0's StableDiffusionSafetyChecker.forward, run on an instance built without
transformers (nn.Module.__init__ instead of the PreTrainedModel stand-in's) whose vision_model is
the reference. The Flax checker's scores (float32, jnp.round) are computed here as well and its
flags asserted equal to diffusers'.

Writes (fixed seeds, float32, CPU, one thread):
  <out>/safety_checker/config.json, model.safetensors     diffusers' safety_checker/ layout
  <out>/safety_checker/flax_model.msgpack                 the same weights with transformers' Flax
        names and layouts (FlaxStableDiffusionSafetyChecker: vision_model/vision_model/..., conv
        kernel HWIO, dense kernels (in, out), LayerNorm `scale`, nn.Embed `embedding`)
  <out>/feature_extractor/preprocessor_config.json        CLIPImageProcessor at the tiny size
  <out>/always-flags/safety_checker/...                   the same checker with every concept
        threshold at -1.5 (every image is flagged): for the CLI/metadata tests
  <out>/goldens/safety_checker.safetensors, goldens/clip_preprocess_224.safetensors (README)
"""
import argparse
import json
import os
import shutil
import sys


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--tiny-sd", default="tests/data/tiny-sd")
    p.add_argument("--diffusers", default="/work/diffusers-v0.31.0")
    p.add_argument("--shared-tools", default="/work/shared/tools")
    return p.parse_args()


ARGS = parse_args()
sys.path.insert(0, ARGS.shared_tools)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import diffusers_env  # noqa: E402

diffusers_env.setup(ARGS.diffusers)
os.environ["OMP_NUM_THREADS"] = "1"
import msgpack  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from diffusers.pipelines.stable_diffusion import safety_checker as sc_module  # noqa: E402

import clip_vision_reference as ref  # noqa: E402

torch.set_num_threads(1)

VISION = {"hidden_size": 32, "intermediate_size": 37, "num_attention_heads": 4, "num_hidden_layers": 2,
          "image_size": 28, "patch_size": 7, "num_channels": 3, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5}
PROJECTION = 16
MEAN = [0.48145466, 0.4578275, 0.40821073]
STD = [0.26862954, 0.26130258, 0.27577711]


def check_encoder_layers_against_transformers():
    te_dir = os.path.join(ARGS.tiny_sd, "text_encoder")
    cfg = json.load(open(os.path.join(te_dir, "config.json")))
    model = ref.ClipTextReference(cfg)
    model.load_transformers_state(load_file(os.path.join(te_dir, "model.safetensors")))
    golden = load_file(os.path.join(ARGS.tiny_sd, "goldens", "text_encoder.safetensors"))
    with torch.no_grad():
        got = model(golden["input_ids"])
    want = golden["last_hidden_state"]
    err = (got - want).abs().max().item()
    scale = want.abs().max().item()
    print(f"reference encoder layers vs transformers CLIPTextModel: max abs error {err:.3g} (scale {scale:.3g})")
    assert err <= 1e-5 * scale, err


# --- CLIPImageProcessor's steps, written out (transformers 4.48 image_transforms.py) ----------
def clip_resize(img_u8, shortest):
    """resize(): to PIL, Image.resize((w, h), BICUBIC), back to uint8 (the input is uint8, so no
    rescale around the PIL conversion). get_resize_output_image_size(default_to_square=False)."""
    h, w = img_u8.shape[:2]
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = shortest, int(shortest * long / short)
    out_h, out_w = (new_long, new_short) if w <= h else (new_short, new_long)
    return np.array(Image.fromarray(img_u8).resize((out_w, out_h), resample=Image.BICUBIC))


def clip_crop(img, ch, cw):
    h, w = img.shape[:2]
    top, left = (h - ch) // 2, (w - cw) // 2
    assert top >= 0 and left >= 0
    return img[top:top + ch, left:left + cw]


def clip_preprocess(img_u8, shortest, crop):
    resized = clip_resize(img_u8, shortest)
    x = clip_crop(resized, crop, crop)
    x = (x.astype(np.float64) * (1 / 255)).astype(np.float32)  # rescale()
    x = (x - np.array(MEAN, dtype=np.float32)) / np.array(STD, dtype=np.float32)  # normalize()
    return resized, np.ascontiguousarray(x.transpose(2, 0, 1))  # CHW, as return_tensors="np"


# --- images -------------------------------------------------------------------------------------
def test_images():
    rng = np.random.default_rng(20261126)
    yy, xx = np.mgrid[0:64, 0:64]
    noise = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    gradient = np.stack([xx * 4, yy * 4, (xx + yy) * 2], -1).astype(np.uint8)
    checker = (((xx // 8 + yy // 8) % 2)[..., None] * np.array([250, 30, 200])).astype(np.uint8)
    blob = np.clip(255 * np.exp(-((xx - 20) ** 2 + (yy - 40) ** 2) / 200.0), 0, 255).astype(np.uint8)
    blob = np.stack([blob, 255 - blob, blob // 3], -1)
    wide = rng.integers(0, 256, (6, 10, 3)).repeat(8, 0).repeat(8, 1).astype(np.uint8)  # 80×48 blocks
    return [noise, gradient, checker, blob], wide


def build_checker(seed):
    torch.manual_seed(seed)
    vision = ref.ClipVisionModel(VISION)
    with torch.no_grad():  # exercise every parameter: non-trivial norms and embeddings
        for name, p in vision.named_parameters():
            if "norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn_like(p))
        vision.vision_model.embeddings.position_embedding.weight.mul_(0.5)
    checker = sc_module.StableDiffusionSafetyChecker.__new__(sc_module.StableDiffusionSafetyChecker)
    torch.nn.Module.__init__(checker)  # not the transformers stand-in's PreTrainedModel.__init__
    checker.vision_model = vision
    checker.visual_projection = torch.nn.Linear(VISION["hidden_size"], PROJECTION, bias=False)
    checker.concept_embeds = torch.nn.Parameter(torch.randn(17, PROJECTION), requires_grad=False)
    checker.special_care_embeds = torch.nn.Parameter(torch.randn(3, PROJECTION), requires_grad=False)
    checker.concept_embeds_weights = torch.nn.Parameter(torch.ones(17), requires_grad=False)
    checker.special_care_embeds_weights = torch.nn.Parameter(torch.ones(3), requires_grad=False)
    return checker.eval()


def cos(a, b):
    return sc_module.cosine_distance(a, b).numpy()


def midpoint(above, below, what):
    """A threshold between the value that must score > 0 and the largest that must not."""
    gap = above - below
    assert gap > 0.02, f"{what}: gap {gap:.4f} too small to place a threshold robustly"
    return (above + below) / 2


def tune_thresholds(checker, clip_input, flagged=3, special=2):
    """Image `flagged` trips concept 0; image `special` trips special-care concept 0, and concept 1
    only because of the 0.01 that special care adds (its score before: −0.005); none other trips.
    The embeddings of a random tower share a large common part, so the tuned concepts point along
    an image's difference from the mean embedding (plus noise)."""
    with torch.no_grad():
        e = checker.visual_projection(checker.vision_model(clip_input)[1])
        g = torch.Generator().manual_seed(7)

        def towards(i):
            d = e[i] - e.mean(0)
            return d + 0.2 * d.norm() * torch.randn(PROJECTION, generator=g) / PROJECTION ** 0.5

        checker.special_care_embeds[0] = towards(special)
        checker.concept_embeds[0] = towards(flagged)
        checker.concept_embeds[1] = towards(special)
    n = clip_input.shape[0]
    others = lambda i: [j for j in range(n) if j != i]  # noqa: E731
    cs, cc = cos(e, checker.special_care_embeds), cos(e, checker.concept_embeds)
    ws = cs.max(0) + 0.05
    ws[0] = midpoint(cs[special, 0], cs[others(special), 0].max(), "special care 0")
    adj = np.zeros(n)
    adj[special] = 0.01
    wc = (cc + adj[:, None]).max(0) + 0.05
    wc[0] = midpoint(cc[flagged, 0], (cc[:, 0] + adj)[others(flagged)].max(), "concept 0")
    wc[1] = cc[special, 1] + 0.005
    assert cc[others(special), 1].max() + 0.01 < wc[1] - 0.02, "concept 1 would trip another image"
    with torch.no_grad():
        checker.special_care_embeds_weights.copy_(torch.tensor(ws, dtype=torch.float32))
        checker.concept_embeds_weights.copy_(torch.tensor(wc, dtype=torch.float32))


def flax_scores(checker, e):
    """FlaxStableDiffusionSafetyCheckerModule.__call__ in float32 numpy (jnp.round = np.round)."""
    e = e.numpy().astype(np.float32)

    def jcos(a, b):
        na = (a.T / np.clip(np.linalg.norm(a, axis=1), 1e-12, None)).T
        nb = (b.T / np.clip(np.linalg.norm(b, axis=1), 1e-12, None)).T
        return na @ nb.T

    cs = jcos(e, checker.special_care_embeds.numpy())
    cc = jcos(e, checker.concept_embeds.numpy())
    special = np.round(cs - checker.special_care_embeds_weights.numpy()[None, :], 3)
    is_special = np.any(special > 0, axis=1, keepdims=True)
    concept = np.round(cc - checker.concept_embeds_weights.numpy()[None, :] + is_special * np.float32(0.01), 3)
    return special.astype(np.float32), concept.astype(np.float32), is_special[:, 0], np.any(concept > 0, axis=1)


def torch_scores(checker, e):
    """What diffusers' forward computes per image (its result dicts, which it does not return)."""
    cs, cc = cos(e, checker.special_care_embeds), cos(e, checker.concept_embeds)
    special, concept, is_special = np.zeros_like(cs), np.zeros_like(cc), []
    for i in range(e.shape[0]):
        adjustment = 0.0
        for k in range(cs.shape[1]):
            special[i, k] = round(cs[i][k] - checker.special_care_embeds_weights[k].item() + adjustment, 3)
            if special[i, k] > 0:
                adjustment = 0.01
        is_special.append(adjustment > 0)
        for k in range(cc.shape[1]):
            concept[i, k] = round(cc[i][k] - checker.concept_embeds_weights[k].item() + adjustment, 3)
    return special, concept, np.array(is_special)


def write_flax_msgpack(path, state):
    tree = {}
    for name, t in state.items():
        a = t.numpy().astype("<f4")
        parts = name.split(".")
        leaf = parts[-1]
        if leaf == "weight":
            if parts[-2].endswith("_embedding") and a.ndim == 2:
                leaf = "embedding"
            elif a.ndim == 1:
                leaf = "scale"
            elif a.ndim == 4:
                leaf, a = "kernel", a.transpose(2, 3, 1, 0)
            else:
                leaf, a = "kernel", a.T
        node = tree
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[leaf] = msgpack.ExtType(1, msgpack.packb(((*a.shape,), "float32", np.ascontiguousarray(a).tobytes()),
                                                      use_bin_type=True))
    with open(path, "wb") as f:
        f.write(msgpack.packb(tree, use_bin_type=True, strict_types=True))


def write_checker_folder(folder, checker, flax):
    os.makedirs(folder, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in checker.state_dict().items()}
    save_file(state, os.path.join(folder, "model.safetensors"))
    config = {"_class_name_note": "diffusers StableDiffusionSafetyChecker (tiny random, tests only)",
              "architectures": ["StableDiffusionSafetyChecker"], "model_type": "clip",
              "projection_dim": PROJECTION, "vision_config": dict(VISION, model_type="clip_vision_model"),
              "torch_dtype": "float32"}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    if flax:
        write_flax_msgpack(os.path.join(folder, "flax_model.msgpack"), state)


def write_feature_extractor(folder, size):
    os.makedirs(folder, exist_ok=True)
    config = {"crop_size": {"height": size, "width": size}, "do_center_crop": True, "do_convert_rgb": True,
              "do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": MEAN, "image_std": STD,
              "image_processor_type": "CLIPImageProcessor", "resample": 3, "rescale_factor": 1 / 255,
              "size": {"shortest_edge": size}}
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)


def f32(a):
    return torch.tensor(np.asarray(a), dtype=torch.float32)


def main():
    check_encoder_layers_against_transformers()
    out = ARGS.out
    size = VISION["image_size"]
    squares, wide = test_images()
    images = squares + [wide]
    clip_input = torch.tensor(np.stack([clip_preprocess(im, size, size)[1] for im in images]))
    checker = build_checker(1234)
    tune_thresholds(checker, clip_input)

    with torch.no_grad():
        last, pooled = checker.vision_model(clip_input)
        embeds = checker.visual_projection(pooled)
        _, has_nsfw = checker(clip_input, [im.copy() for im in images])  # diffusers' forward
    t_special, t_concept, t_is_special = torch_scores(checker, embeds)
    f_special, f_concept, f_is_special, f_nsfw = flax_scores(checker, embeds)
    assert list(f_nsfw) == list(has_nsfw), (f_nsfw, has_nsfw)
    assert list(f_is_special) == list(t_is_special)
    assert any(has_nsfw) and not all(has_nsfw), has_nsfw
    print("flags (diffusers):", has_nsfw, "special care:", list(t_is_special))
    print("max |flax - torch| concept score:", np.abs(f_concept - t_concept).max())

    write_checker_folder(os.path.join(out, "safety_checker"), checker, flax=True)
    write_feature_extractor(os.path.join(out, "feature_extractor"), size)
    with torch.no_grad():
        checker.concept_embeds_weights.fill_(-1.5)
    write_checker_folder(os.path.join(out, "always-flags", "safety_checker"), checker, flax=False)
    write_feature_extractor(os.path.join(out, "always-flags", "feature_extractor"), size)

    os.makedirs(os.path.join(out, "goldens"), exist_ok=True)
    save_file({
        "images_u8": f32(np.stack(squares)), "image_wide_u8": f32(wide), "clip_input": clip_input,
        "last_hidden_state": last, "pooled": pooled, "image_embeds": embeds,
        "special_cos": f32(cos(embeds, checker.special_care_embeds)),
        "concept_cos": f32(cos(embeds, checker.concept_embeds)),
        "special_scores": f32(f_special), "concept_scores": f32(f_concept),
        "torch_special_scores": f32(t_special), "torch_concept_scores": f32(t_concept),
        "special_care": f32(t_is_special), "has_nsfw": f32(has_nsfw),
    }, os.path.join(out, "goldens", "safety_checker.safetensors"))

    rng = np.random.default_rng(224)
    small = rng.integers(0, 256, (8, 8, 3)).repeat(8, 0).repeat(8, 1).astype(np.uint8)  # 64×64, upscaled
    yy, xx = np.mgrid[0:200, 0:300]
    large = np.stack([(xx * 7 + yy * 3) % 256, (xx * yy) % 256, rng.integers(0, 256, (200, 300))], -1).astype(np.uint8)
    resized_a, pixels_a = clip_preprocess(small, 224, 224)
    resized_b, pixels_b = clip_preprocess(large, 224, 224)
    save_file({"src_a": f32(small), "resized_a": f32(resized_a), "pixel_values_a": f32(pixels_a),
               "src_b": f32(large), "resized_b": f32(resized_b), "pixel_values_b": f32(pixels_b)},
              os.path.join(out, "goldens", "clip_preprocess_224.safetensors"))
    print("wrote", out)


if __name__ == "__main__":
    main()
