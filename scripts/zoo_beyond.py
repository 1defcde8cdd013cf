"""Models beyond the two zoos, for ``scripts/zoo_check.py --zoo beyond``.

The measure of "any model" should not stop at the models gradcli was measured on.
These are models nobody tuned gradcli to: more transformers architectures (speech,
vision, state-space, recurrent), torchvision's other tasks (segmentation, video,
optical flow) and compositions of ``torch.nn`` layers that user code writes (losses,
recurrent layers, padding and pooling variants). Each builder returns
``(module, positional inputs, keyword inputs)``, random weights, no downloads.
"""
from __future__ import annotations

S = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
CONV_AUDIO = dict(conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                  num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4)

# name -> (config class, model class, config kwargs, inputs kind)
TRANSFORMERS = {
    "hf-wav2vec2": ("Wav2Vec2Config", "Wav2Vec2Model", dict(S, **CONV_AUDIO, vocab_size=40), "wave"),
    "hf-hubert": ("HubertConfig", "HubertModel", dict(S, **CONV_AUDIO), "wave"),
    "hf-segformer": ("SegformerConfig", "SegformerModel", dict(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
        num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], decoder_hidden_size=32),
        "image"),
    "hf-mobilevit": ("MobileViTConfig", "MobileViTModel", dict(
        image_size=32, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64]),
        "image"),
    "hf-convnextv2": ("ConvNextV2Config", "ConvNextV2Model",
                      dict(hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1]), "image"),
    "hf-beit": ("BeitConfig", "BeitModel", dict(S, image_size=32, patch_size=8,
                                               use_relative_position_bias=True), "image"),
    "hf-deit": ("DeiTConfig", "DeiTModel", dict(S, image_size=32, patch_size=8), "image"),
    "hf-swin": ("SwinConfig", "SwinModel", dict(image_size=32, patch_size=4, embed_dim=16,
                                               depths=[1, 1], num_heads=[1, 2], window_size=4),
                "image"),
    "hf-xlnet": ("XLNetConfig", "XLNetModel", dict(vocab_size=100, d_model=32, n_layer=2,
                                                  n_head=4, d_inner=64), "text"),
    "hf-mpnet": ("MPNetConfig", "MPNetModel", dict(S, vocab_size=100), "text"),
    "hf-funnel": ("FunnelConfig", "FunnelModel", dict(vocab_size=100, block_sizes=[1, 1],
                                                     d_model=32, n_head=4, d_head=8,
                                                     d_inner=64), "text"),
    "hf-squeezebert": ("SqueezeBertConfig", "SqueezeBertModel",
                       dict(S, vocab_size=100, embedding_size=32), "text"),
    "hf-mobilebert": ("MobileBertConfig", "MobileBertModel", dict(
        S, vocab_size=100, embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16,
        num_feedforward_networks=2), "text"),
    "hf-gptj": ("GPTJConfig", "GPTJModel", dict(vocab_size=100, n_embd=32, n_layer=2, n_head=4,
                                               rotary_dim=4), "text"),
    "hf-codegen": ("CodeGenConfig", "CodeGenModel", dict(vocab_size=100, n_embd=32, n_layer=2,
                                                        n_head=4, rotary_dim=4), "text"),
    "hf-stablelm": ("StableLmConfig", "StableLmModel", dict(S, vocab_size=100,
                                                           num_key_value_heads=2), "text"),
    "hf-qwen3": ("Qwen3Config", "Qwen3Model", dict(S, vocab_size=100, num_key_value_heads=2,
                                                  head_dim=8), "text"),
    "hf-gemma2": ("Gemma2Config", "Gemma2Model", dict(S, vocab_size=100, num_key_value_heads=2,
                                                     head_dim=8), "text"),
    "hf-mamba": ("MambaConfig", "MambaModel", dict(vocab_size=100, hidden_size=32,
                                                  num_hidden_layers=2, state_size=4), "ids"),
    "hf-rwkv": ("RwkvConfig", "RwkvModel", dict(vocab_size=100, hidden_size=32,
                                               num_hidden_layers=2, attention_hidden_size=32,
                                               intermediate_size=64), "ids"),
    "hf-layoutlm": ("LayoutLMConfig", "LayoutLMModel", dict(S, vocab_size=100), "text"),
    "hf-marian": ("MarianConfig", "MarianModel", dict(
        vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, pad_token_id=0,
        decoder_start_token_id=0), "seq2seq"),
}

# torchvision's other tasks: name -> (builder kind, torchvision name)
TORCHVISION = {
    "tv-seg-lraspp_mobilenet_v3_large": ("segmentation", "lraspp_mobilenet_v3_large"),
    "tv-seg-deeplabv3_mobilenet_v3_large": ("segmentation", "deeplabv3_mobilenet_v3_large"),
    "tv-seg-fcn_resnet50": ("segmentation", "fcn_resnet50"),
    "tv-video-r3d_18": ("video", "r3d_18"),
    "tv-video-mc3_18": ("video", "mc3_18"),
    "tv-video-r2plus1d_18": ("video", "r2plus1d_18"),
    "tv-flow-raft_small": ("flow", "raft_small"),
}

NN = ["nn-transformer", "nn-mha-kdim-padmask", "nn-gru-bidirectional", "nn-losses", "nn-ctc-loss",
      "nn-activations", "nn-rrelu", "nn-circular-pad", "nn-pools-pads", "nn-adaptive-max-pool",
      "nn-fractional-max-pool", "nn-conv3d", "nn-embedding-bag-lstm-cell", "nn-unet"]

# timm (``pip install timm``, not a gradcli dependency): image models of another library,
# ``pretrained=False`` (random weights, nothing downloaded), 10 classes, 2 images of 64x64.
# Chosen for what the other zoos lack: weight-standardized and normalizer-free
# convolutions (BiT, NF-ResNet), pooling and MLP token mixers (PoolFormer), cross-covariance
# attention (XCiT), re-parameterizable blocks (FastViT, RepVGG), multi-scale branches
# (Res2Net, selective kernels, HRNet, DPN, DLA), and the mobile families of 2019-2024.
TIMM = ["resnetv2_50x1_bit", "poolformer_s12", "xcit_nano_12_p16_224", "twins_svt_small",
        "mobilevitv2_050", "edgenext_xx_small", "ghostnet_100", "hrnet_w18_small", "dla34",
        "dpn68", "res2net50_14w_8s", "skresnet18", "nf_resnet26", "efficientvit_b0",
        "fastvit_t8", "repvgg_a0", "mobilenetv4_conv_small", "convnextv2_atto", "hgnetv2_b0",
        "regnetz_b16", "ese_vovnet19b_dw", "gernet_s", "rexnet_100", "hardcorenas_a"]

MODELS = list(TRANSFORMERS) + list(TORCHVISION) + NN + [f"timm-{m}" for m in TIMM]


def build(name):
    """``(module, args, kwargs)`` of model ``name`` (a name of ``MODELS``)."""
    import torch

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    if name in TRANSFORMERS:
        return _transformers(name, torch, gen)
    if name in TORCHVISION:
        return _torchvision(*TORCHVISION[name], torch, gen)
    if name.startswith("timm-"):
        import timm

        model = timm.create_model(name[len("timm-"):], pretrained=False, num_classes=10)
        return model, (torch.randn(2, 3, 64, 64, generator=gen),), {}
    return _nn(name, torch, gen)


def _transformers(name, torch, gen):
    import transformers

    config_cls, model_cls, kwargs, kind = TRANSFORMERS[name]
    config = getattr(transformers, config_cls)(**kwargs)
    if hasattr(config, "use_cache"):
        config.use_cache = False
    model = getattr(transformers, model_cls)(config)
    if kind == "image":
        return model, (), {"pixel_values": torch.randn(2, 3, 32, 32, generator=gen)}
    if kind == "wave":
        return model, (), {"input_values": torch.randn(2, 400, generator=gen)}
    ids = torch.randint(5, 90, (2, 8), generator=gen)
    if kind == "ids":
        return model, (), {"input_ids": ids}
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, -2:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    if kind == "seq2seq":
        inputs["decoder_input_ids"] = ids[:, :5]
    return model, (), inputs


def _torchvision(kind, tv_name, torch, gen):
    import torchvision

    if kind == "segmentation":
        net = torchvision.models.get_model(tv_name, weights=None, weights_backbone=None,
                                           num_classes=4, aux_loss=False)

        class Segmentation(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = net

            def forward(self, x):
                return self.net(x)["out"]

        return Segmentation(), (torch.randn(2, 3, 64, 64, generator=gen),), {}
    if kind == "video":
        net = torchvision.models.get_model(tv_name, weights=None, num_classes=5)
        return net, (torch.randn(2, 3, 4, 32, 32, generator=gen),), {}
    net = torchvision.models.get_model(tv_name, weights=None)

    class Flow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, a, b):
            return self.net(a, b, num_flow_updates=2)[-1]

    return Flow(), (torch.randn(1, 3, 128, 128, generator=gen),
                    torch.randn(1, 3, 128, 128, generator=gen)), {}


def _nn(name, torch, gen):
    nn, F = torch.nn, torch.nn.functional

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    class Seq(nn.Module):
        def __init__(self, *mods):
            super().__init__()
            self.m = nn.Sequential(*mods)

        def forward(self, x):
            return self.m(x)

    if name == "nn-transformer":
        class Transformer(nn.Module):
            def __init__(self):
                super().__init__()
                self.t = nn.Transformer(16, 2, 1, 1, 32, dropout=0.0, batch_first=True)

            def forward(self, src, tgt):
                mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
                return self.t(src, tgt, tgt_mask=mask)
        return Transformer(), (randn(2, 5, 16), randn(2, 4, 16)), {}
    if name == "nn-mha-kdim-padmask":
        class Attention(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.MultiheadAttention(16, 4, batch_first=True, kdim=8, vdim=8)

            def forward(self, q, k):
                pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
                return self.a(q, k, k, key_padding_mask=pad)[0]
        return Attention(), (randn(2, 3, 16), randn(2, 5, 8)), {}
    if name == "nn-gru-bidirectional":
        class GRU(nn.Module):
            def __init__(self):
                super().__init__()
                self.r = nn.GRU(6, 8, 2, bidirectional=True, batch_first=True)

            def forward(self, x):
                return self.r(x)[0]
        return GRU(), (randn(2, 7, 6),), {}
    if name == "nn-losses":
        class Losses(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(6, 5)
                self.register_buffer("y", torch.tensor([1, 0, 4, 2]))
                self.register_buffer("t", torch.rand(4, 5, generator=gen))

            def forward(self, x):
                z, t = self.fc(x), self.t
                return (F.cross_entropy(z, self.y, label_smoothing=0.1)
                        + F.binary_cross_entropy_with_logits(z, t) + F.smooth_l1_loss(z, t)
                        + F.kl_div(F.log_softmax(z, -1), t, reduction="batchmean")
                        + F.huber_loss(z, t, delta=0.5) + F.multi_margin_loss(z, self.y)
                        + F.poisson_nll_loss(z, t)
                        + F.cosine_embedding_loss(z[:2], z[2:], torch.tensor([1, -1]))
                        + F.triplet_margin_loss(z[0:1], z[1:2], z[2:3]))
        return Losses(), (randn(4, 6),), {}
    if name == "nn-ctc-loss":
        class CTC(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(6, 5)

            def forward(self, x):
                lp = F.log_softmax(self.fc(x), -1).transpose(0, 1)
                return F.ctc_loss(lp, torch.tensor([[1, 2, 3], [2, 2, 0]]),
                                  torch.tensor([7, 7]), torch.tensor([3, 2]))
        return CTC(), (randn(2, 7, 6),), {}
    if name == "nn-activations":
        return Seq(nn.Linear(6, 8), nn.PReLU(8), nn.Mish(), nn.CELU(), nn.SELU(),
                   nn.Softshrink(0.1), nn.Hardshrink(0.05), nn.Tanhshrink(), nn.LogSigmoid(),
                   nn.Threshold(0.1, -1.0), nn.Softmin(-1), nn.GLU(), nn.Softsign(), nn.ELU(0.5),
                   nn.Hardtanh(-0.5, 0.5), nn.ReLU6()), (randn(3, 6),), {}
    if name == "nn-rrelu":
        return Seq(nn.Linear(6, 8), nn.RReLU()), (randn(3, 6),), {}
    if name == "nn-circular-pad":
        return Seq(nn.Conv2d(3, 4, 3), nn.CircularPad2d(1)), (randn(2, 3, 8, 8),), {}
    if name == "nn-pools-pads":
        return Seq(nn.ReflectionPad2d(2), nn.Conv2d(3, 4, 3), nn.ReplicationPad2d((1, 0, 2, 1)),
                   nn.ZeroPad2d(1), nn.LPPool2d(2, 2), nn.Upsample(scale_factor=2),
                   nn.PixelUnshuffle(2), nn.ChannelShuffle(2), nn.LocalResponseNorm(3)), \
            (randn(2, 3, 8, 8),), {}
    if name == "nn-adaptive-max-pool":
        return Seq(nn.Conv2d(3, 4, 3), nn.AdaptiveMaxPool2d((3, 2)), nn.Flatten(),
                   nn.Linear(24, 3)), (randn(2, 3, 8, 8),), {}
    if name == "nn-fractional-max-pool":
        return Seq(nn.Conv2d(3, 4, 3), nn.FractionalMaxPool2d(
            2, output_size=(2, 2), _random_samples=torch.rand(2, 4, 2, generator=gen))), \
            (randn(2, 3, 8, 8),), {}
    if name == "nn-conv3d":
        return Seq(nn.Conv3d(2, 4, 3, padding=1, groups=2), nn.BatchNorm3d(4), nn.ReLU(),
                   nn.MaxPool3d(2), nn.AdaptiveAvgPool3d(2), nn.Flatten(), nn.Linear(32, 3)), \
            (randn(2, 2, 4, 6, 6),), {}
    if name == "nn-embedding-bag-lstm-cell":
        class Bag(nn.Module):
            def __init__(self):
                super().__init__()
                self.e = nn.EmbeddingBag(10, 6, mode="mean")
                self.c = nn.LSTMCell(6, 4)

            def forward(self, x):
                ids, off = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4])
                h, c = self.c(self.e(ids, off) + x)
                return h * c
        return Bag(), (randn(2, 6),), {}
    if name == "nn-unet":
        class UNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.inc = nn.Conv2d(3, 8, 3, padding=1)
                self.gn = nn.GroupNorm(4, 8)
                self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
                self.up = nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1)
                self.inorm = nn.InstanceNorm2d(8, affine=True)
                self.shuffle = nn.Sequential(nn.Conv2d(8, 12, 1), nn.PixelShuffle(2))
                self.out = nn.ConvTranspose2d(3, 2, 2, stride=2)

            def forward(self, x):
                h = F.silu(self.gn(self.inc(x)))
                u = self.inorm(self.up(torch.relu(self.down(h)))) + h
                s = F.interpolate(self.shuffle(u), scale_factor=0.5, mode="bilinear")
                return self.out(s)
        return UNet(), (randn(2, 3, 8, 8),), {}
    raise KeyError(name)
