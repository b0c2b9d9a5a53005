"""The linear-attention and state-space mixers (``costcalc.blocks.MIXERS``), each in two forms.

A mixer keeps a fixed-size state per sequence (``MixerCache``: the recurrent state and the
convolution window) instead of a KV cache. Its projections are ``nn.Linear`` modules named as
``costcalc.core.linear.MIXER`` names them; what is left runs in one of two forms, chosen at
run time:

- ``recurrent``: token by token, each product of ``costcalc.core.mixers.recurrent_products``
  a ``torch.matmul`` (decays and gates elementwise); the convolution one output per token;
- ``chunked``: the algorithm transformers' torch path runs (``mixers.chunk_products``,
  ``step_products``, ``between_chunks``, ``conv_outputs``): whole chunks of Q_c, the last one
  padded; Gated DeltaNet's and KDA's single-token step over a cache elementwise only;
  Mamba-2's products between the chunks' states; lightning's last block unpadded and its
  per-token steps over any cached state; Mamba-1's per-token loop with only the readout a
  matmul; the convolution padded K_c - 1 on both sides for a prompt, over a cache the K_c kept
  positions and the new tokens padded alike, a decode step over K_c + 1 positions unpadded.

Both forms compute the same function (tests/test_verify.py holds them close). Every product
of the scan goes through a ``Scan`` module and the convolution through a ``Conv`` module, one
of each per form (``scan.recurrent``, ``scan.chunked``, ...), so the FLOP counter charges them
to the core's operators ``scan`` and ``conv`` under the form that ran them. While counting,
``also`` holds the other form: the mixer runs it too, on a copy of the state, its output
dropped (``verify.counting``). ``watchers`` see which form runs (the counter of what FlopCounterMode
does not see: the elementwise work and the triangular solves).
"""
from __future__ import annotations

import contextlib
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

FORMS = ("recurrent", "chunked")
STATE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp64": torch.float64}


class Scan(nn.Module):
    """One matrix product of a scan (or an einsum of two operands): its own module so the
    counter charges it to ``scan``."""

    def forward(self, a: torch.Tensor, b: torch.Tensor, equation: Optional[str] = None) -> torch.Tensor:
        return torch.einsum(equation, a, b) if equation else torch.matmul(a, b)


class Conv(nn.Module):
    """The depthwise convolution over [B, channels, positions] with another module's weight
    [channels, 1, K_c]: its own module so the counter charges it to ``conv``."""

    def forward(self, x: torch.Tensor, weight: torch.Tensor, padding: int) -> torch.Tensor:
        return F.conv1d(x, weight, padding=padding, groups=x.shape[1])


class MixerCache:
    """One layer's state for B sequences: the last K_c inputs of the convolution (model dtype)
    and the recurrent state (``state_dtype``); None until a forward writes them."""

    def __init__(self) -> None:
        self.conv: Optional[torch.Tensor] = None
        self.state: Optional[torch.Tensor] = None


def scan_dtype(x: torch.Tensor) -> torch.dtype:
    """The scan runs in fp32 (transformers casts to it), fp64 for an fp64 model."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


class Mixer(nn.Module):
    """What every mixer shares: the forms' product modules, the convolution, the cache.

    A subclass gives ``project(x)`` (its input projections: the convolution's input and the
    rest), ``scan(parts, state, past, form)`` (-> outputs, new state) and ``output(y, parts)``."""

    channels = 0                 # convolution channels (0: none)

    def __init__(self, K_c: Optional[int], state_dtype: Optional[torch.dtype]) -> None:
        super().__init__()
        self.K_c = K_c
        self.state_dtype = state_dtype
        self.scan = nn.ModuleDict({f: Scan() for f in FORMS})
        if self.channels:
            self.conv1d_weight = nn.Parameter(torch.empty(self.channels, 1, K_c))
            self.conv = nn.ModuleDict({f: Conv() for f in FORMS})
        self.also: tuple[str, ...] = ()
        self.watchers: list = []          # context managers entered while a form's scan and conv run

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask, cache: Optional[MixerCache],
                form: str = "chunked") -> torch.Tensor:
        from .model import Packed

        if isinstance(mask, Packed):      # varlen: each sequence from an empty state, as varlen kernels run
            ys, start = [], 0
            for n in mask.lengths:
                ys.append(self(x[:, start:start + n], positions[start:start + n] - start, None, None, form))
                start += n
            return torch.cat(ys, dim=1)
        past = int(positions[0])
        conv_in, rest = self.project(x)
        old = (cache.conv, cache.state) if cache is not None and past else (None, None)
        y, new, mid = self.core(conv_in, rest, old, past, form)
        for other in self.also:          # the other form, counted apart; its output dropped
            if other != form:            # (projections between conv and scan: run once, reused)
                self.core(conv_in, rest, old, past, other, mid)
        if cache is not None:
            cache.conv, cache.state = new
        return self.output(y, rest)

    def core(self, conv_in, rest, old, past: int, form: str, mid=None):
        """The convolution (where the mixer has one) and the scan, from the state ``old``;
        ``mid``: what the mixer projects from the convolution's output (Mamba-1's dt, B, C)."""
        conv_state, state = old
        with contextlib.ExitStack() as watching:
            for watch in self.watchers:
                watching.enter_context(watch(form))
            if self.channels:
                conv_in, conv_state = self.convolve(conv_in, conv_state, past, form)
            if mid is None:
                mid = self.middle(conv_in)
            y, state = self.run_scan(conv_in, rest, mid, state, past, form)
        return y, (conv_state, state), mid

    def middle(self, conv_out):
        return None

    def convolve(self, x: torch.Tensor, window: Optional[torch.Tensor], past: int, form: str):
        """x [B, C, channels] -> silu(causal depthwise conv) [B, C, channels], and the last K_c
        inputs kept (zeros before the first token)."""
        B, C, _ = x.shape
        K = self.K_c
        xt = x.transpose(1, 2)                                             # [B, channels, C]
        if window is None:
            window = xt.new_zeros(B, self.channels, K)
        seq = torch.cat([window, xt], dim=-1)                              # [B, channels, K + C]
        conv = self.conv[form]
        if form == "recurrent":                  # one output per new token: its K_c inputs, no padding
            out = conv(seq[..., 1:], self.conv1d_weight, 0)
        elif not past:                           # a prompt: padded K_c - 1 on both sides, the first C kept
            out = conv(xt, self.conv1d_weight, K - 1)[..., :C]
        elif C == 1:                             # a decode step: the K_c kept and the token, no padding
            out = conv(seq, self.conv1d_weight, 0)[..., -1:]
        else:                                    # several over a cache: kept + new, padded as a prompt
            out = conv(seq, self.conv1d_weight, K - 1)[..., K:K + C]
        return F.silu(out).transpose(1, 2), seq[..., -K:]

    def keep(self, state: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """The state as the cache keeps it (``state_dtype``, else the model's dtype; an fp64 model,
        run to hold cached against recomputed logits closely, keeps it in fp64)."""
        return state.to(like.dtype if like.dtype == torch.float64 else self.state_dtype or like.dtype)


# --- the delta rule: Gated DeltaNet and Kimi Delta Attention ------------------------------

class DeltaRule(Mixer):
    """Shared by gdn (a decay per head) and kda (a decay per key channel): per value head a
    state d_lk x d_lv, updated S <- S decay + k (beta (v - k^T S)), read q^T S."""

    def delta_scan(self, q, k, v, beta, g, state, past: int, form: str):
        """q, k [B, H, C, d_lk], v [B, H, C, d_lv], beta [B, H, C], g (log decay) [B, H, C] or
        [B, H, C, d_lk]; state [B, H, d_lk, d_lv] or None -> o [B, H, C, d_lv], state."""
        dt = scan_dtype(q)
        q, k, v, beta, g = (t.to(dt) for t in (q, k, v, beta, g))
        B, H, C, dk = k.shape
        S = torch.zeros(B, H, dk, v.shape[-1], dtype=dt, device=q.device) if state is None else state.to(dt)
        per_channel = g.dim() == 4
        scan = self.scan[form]
        if form == "recurrent":
            outs = []
            for t in range(C):
                decay = g[:, :, t].exp()
                S = S * (decay[..., None] if per_channel else decay[..., None, None])
                kt, qt = k[:, :, t, None], q[:, :, t, None]                  # [B, H, 1, dk]
                pred = scan(kt, S)                                           # k^T S [B, H, 1, dv]
                delta = beta[:, :, t, None, None] * (v[:, :, t, None] - pred)
                S = S + scan(kt.transpose(-1, -2), delta)                    # k (beta (v - k^T S))
                outs.append(scan(qt, S))                                     # q^T S
            return torch.cat(outs, dim=2), S
        if past and C == 1:                      # transformers' step over a cache: elementwise only
            decay = g[:, :, 0].exp()
            S = S * (decay[..., None] if per_channel else decay[..., None, None])
            kt = k[:, :, 0, :, None]                                         # [B, H, dk, 1]
            pred = (kt * S).sum(-2)                                          # [B, H, dv]
            S = S + kt * (beta[:, :, 0, None] * (v[:, :, 0] - pred))[:, :, None, :]
            return (q[:, :, 0, :, None] * S).sum(-2)[:, :, None], S
        return self.delta_chunks(q, k, v, beta, g, S, scan)

    def delta_chunks(self, q, k, v, beta, g, S, scan):
        Q = self.Q_c
        B, H, C, dk = k.shape
        n = -(-C // Q)
        pad = n * Q - C                          # the last chunk padded with zeros (no update, decay 1)

        def chunks(t):
            t = F.pad(t, (0, 0, 0, pad)) if t.dim() == 4 else F.pad(t, (0, pad))
            return t.reshape(B, H, n, Q, *t.shape[3:])

        q, k, v, beta, g = map(chunks, (q, k, v, beta, g))
        g = g.cumsum(3)                                                      # within each chunk
        i = torch.arange(Q, device=q.device)
        below, strictly = i[:, None] >= i[None, :], i[:, None] > i[None, :]
        k_beta, v_beta = k * beta[..., None], v * beta[..., None]
        per_channel = g.dim() == 5
        if per_channel:                          # kda: decayed scores elementwise, per channel
            diff = g[..., :, None, :] - g[..., None, :, :]                   # [.., Q, Q, dk]
            decay = diff.masked_fill(~below[..., None], float("-inf")).exp()
            a_kk = (k_beta[..., :, None, :] * k[..., None, :, :] * decay).sum(-1).masked_fill(~strictly, 0)
            a_qk = (q[..., :, None, :] * k[..., None, :, :] * decay).sum(-1)
            T = unit_lower_inverse(-a_kk)                                    # (I + A)^-1, an elementwise loop
            value = scan(T, v_beta)                                          # A v_beta
            k_cumdecay = scan(T, k_beta * g.exp())                           # A (k_beta e^g)
            q_decayed = q * g.exp()
        else:                                    # gdn: decay per head; the two solves are no products
            decay = (g[..., :, None] - g[..., None, :]).masked_fill(~below, float("-inf")).exp()
            a_kk = (scan(k_beta, k.transpose(-1, -2)) * decay).masked_fill(~strictly, 0)   # K_beta K^T
            a_qk = scan(q, k.transpose(-1, -2)) * decay                                    # Q K^T
            eye = torch.eye(Q, dtype=q.dtype, device=q.device)
            value = torch.linalg.solve_triangular(eye + a_kk, v_beta, upper=False, unitriangular=True)
            k_cumdecay = torch.linalg.solve_triangular(eye + a_kk, k_beta * g.exp()[..., None], upper=False,
                                                       unitriangular=True)
            q_decayed = q * g.exp()[..., None]
        outs = []
        for c in range(n):
            v_new = value[:, :, c] - scan(k_cumdecay[:, :, c], S)           # k_cumdecay S
            o = scan(q_decayed[:, :, c], S) + scan(a_qk[:, :, c], v_new)    # (q e^g) S + A_qk v_new
            last = g[:, :, c, -1:]                                           # [B, H, 1(, dk)]
            if per_channel:
                k_tail = k[:, :, c] * (last - g[:, :, c]).exp()
                S = S * last.transpose(-1, -2).exp()
            else:
                k_tail = k[:, :, c] * (last - g[:, :, c]).exp()[..., None]
                S = S * last.exp()[..., None]
            S = S + scan(k_tail.transpose(-1, -2), v_new)                   # K^T v_new
            outs.append(o)
        return torch.cat(outs, dim=2)[:, :, :C], S


def unit_lower_inverse(a: torch.Tensor) -> torch.Tensor:
    """(I - a)^-1 for a strictly lower triangular a [.., Q, Q], row by row, elementwise (the
    loop transformers' KDA path runs: no matrix product)."""
    a = a.clone()
    for i in range(1, a.shape[-1]):
        row = a[..., i, :i].clone()
        a[..., i, :i] = row + (row[..., :, None] * a[..., :i, :i]).sum(-2)
    return a + torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)


class GatedDeltaNet(DeltaRule):
    """Gated DeltaNet (Qwen3-Next, Qwen3.5): q, k (h_lk heads of d_lk), v and the gate z (h_lv
    heads of d_lv) in ``in_proj_qkvz``; beta and the decay input in ``in_proj_ba``; q, k, v
    convolved; q and k repeated to the value heads; a gated RMSNorm; ``out_proj``."""

    def __init__(self, d: int, h_lk: int, h_lv: int, d_lk: int, d_lv: int, K_c: int, Q_c: int, state_dtype) -> None:
        self.h_lk, self.h_lv, self.d_lk, self.d_lv, self.Q_c = h_lk, h_lv, d_lk, d_lv, Q_c
        self.channels = 2 * h_lk * d_lk + h_lv * d_lv
        super().__init__(K_c, state_dtype)
        self.in_proj_qkvz = nn.Linear(d, 2 * h_lk * d_lk + 2 * h_lv * d_lv, bias=False)
        self.in_proj_ba = nn.Linear(d, 2 * h_lv, bias=False)
        self.A_log = nn.Parameter(torch.empty(h_lv))
        self.dt_bias = nn.Parameter(torch.empty(h_lv))
        self.out_proj = nn.Linear(h_lv * d_lv, d, bias=False)

    def project(self, x):
        qkv, z = self.in_proj_qkvz(x).split([self.channels, self.h_lv * self.d_lv], dim=-1)
        return qkv, (z, self.in_proj_ba(x))

    def run_scan(self, qkv, rest, mid, state, past, form):
        B, C, _ = qkv.shape
        kd = self.h_lk * self.d_lk
        q, k, v = qkv.split([kd, kd, self.h_lv * self.d_lv], dim=-1)
        q = q.view(B, C, self.h_lk, self.d_lk).transpose(1, 2).repeat_interleave(self.h_lv // self.h_lk, 1)
        k = k.view(B, C, self.h_lk, self.d_lk).transpose(1, 2).repeat_interleave(self.h_lv // self.h_lk, 1)
        v = v.view(B, C, self.h_lv, self.d_lv).transpose(1, 2)
        b, a = rest[1].split(self.h_lv, dim=-1)
        beta = torch.sigmoid(b).transpose(1, 2)                                          # [B, H, C]
        g = (-self.A_log.exp() * F.softplus(a + self.dt_bias)).transpose(1, 2)
        o, S = self.delta_scan(l2norm(q) * self.d_lk ** -0.5, l2norm(k), v, beta, g, state, past, form)
        return o.transpose(1, 2).to(qkv.dtype), self.keep(S, qkv)

    def output(self, y, rest):
        B, C = y.shape[:2]
        y = l2norm(y) * F.silu(rest[0].view(B, C, self.h_lv, self.d_lv))                # gated norm
        return self.out_proj(y.reshape(B, C, -1))


class KimiDeltaAttention(DeltaRule):
    """Kimi Delta Attention (Kimi Linear): q, k, v (h_lv heads), a per-channel decay and an
    output gate through rank-d_lk and rank-d_lv LoRAs, beta from ``b_proj``; q, k, v convolved."""

    def __init__(self, d: int, h_lv: int, d_lk: int, d_lv: int, K_c: int, Q_c: int, state_dtype) -> None:
        self.h_lv, self.d_lk, self.d_lv, self.Q_c = h_lv, d_lk, d_lv, Q_c
        self.channels = 2 * h_lv * d_lk + h_lv * d_lv
        super().__init__(K_c, state_dtype)
        self.q_proj = nn.Linear(d, h_lv * d_lk, bias=False)
        self.k_proj = nn.Linear(d, h_lv * d_lk, bias=False)
        self.v_proj = nn.Linear(d, h_lv * d_lv, bias=False)
        self.f_a_proj = nn.Linear(d, d_lk, bias=False)
        self.f_b_proj = nn.Linear(d_lk, h_lv * d_lk, bias=False)
        self.b_proj = nn.Linear(d, h_lv, bias=False)
        self.g_a_proj = nn.Linear(d, d_lv, bias=False)
        self.g_b_proj = nn.Linear(d_lv, h_lv * d_lv, bias=False)
        self.o_proj = nn.Linear(h_lv * d_lv, d, bias=False)
        self.A_log = nn.Parameter(torch.empty(h_lv))
        self.dt_bias = nn.Parameter(torch.empty(h_lv * d_lk))

    def project(self, x):
        qkv = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)
        return qkv, (self.f_b_proj(self.f_a_proj(x)), self.b_proj(x), self.g_b_proj(self.g_a_proj(x)))

    def run_scan(self, qkv, rest, mid, state, past, form):
        B, C, _ = qkv.shape
        H, kd = self.h_lv, self.h_lv * self.d_lk
        q, k, v = qkv.split([kd, kd, H * self.d_lv], dim=-1)
        q, k = (t.view(B, C, H, self.d_lk).transpose(1, 2) for t in (q, k))
        v = v.view(B, C, H, self.d_lv).transpose(1, 2)
        f, b, _ = rest
        g = -self.A_log.exp()[:, None] * F.softplus(f + self.dt_bias).view(B, C, H, self.d_lk)
        beta = torch.sigmoid(b).transpose(1, 2)
        o, S = self.delta_scan(l2norm(q) * self.d_lk ** -0.5, l2norm(k), v, beta, g.transpose(1, 2), state, past,
                               form)
        return o.transpose(1, 2).to(qkv.dtype), self.keep(S, qkv)

    def output(self, y, rest):
        B, C = y.shape[:2]
        y = l2norm(y) * torch.sigmoid(rest[2].view(B, C, self.h_lv, self.d_lv))
        return self.o_proj(y.reshape(B, C, -1))


# --- state-space models ------------------------------------------------------------------

def segment_sum(x: torch.Tensor) -> torch.Tensor:
    """[.., T] -> [.., T, T]: sum of x over (j, i] below the diagonal, -inf above."""
    T = x.shape[-1]
    cs = x.cumsum(-1)
    out = cs[..., :, None] - cs[..., None, :]
    return out.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=x.device).tril(), float("-inf"))


class Mamba2(Mixer):
    """Mamba-2 (SSD): ``in_proj`` gives the gate z, x B C (convolved) and dt; per head a state
    d_m x N_s, B and C shared by the h_m / G heads of a group; a gated norm; ``out_proj``."""

    def __init__(self, d: int, h_m: int, d_m: int, G: int, N_s: int, K_c: int, Q_c: int, state_dtype) -> None:
        self.h_m, self.d_m, self.G, self.N_s, self.Q_c = h_m, d_m, G, N_s, Q_c
        self.channels = h_m * d_m + 2 * G * N_s
        super().__init__(K_c, state_dtype)
        self.in_proj = nn.Linear(d, 2 * h_m * d_m + 2 * G * N_s + h_m, bias=False)
        self.A_log = nn.Parameter(torch.empty(h_m))
        self.dt_bias = nn.Parameter(torch.empty(h_m))
        self.D = nn.Parameter(torch.empty(h_m))
        self.out_proj = nn.Linear(h_m * d_m, d, bias=False)

    def project(self, x):
        z, xbc, dt = self.in_proj(x).split([self.h_m * self.d_m, self.channels, self.h_m], dim=-1)
        return xbc, (z, dt)

    def run_scan(self, xbc, rest, mid, state, past, form):
        B, C, _ = xbc.shape
        H, P, N = self.h_m, self.d_m, self.N_s
        dt_ = scan_dtype(xbc)
        x, b, c = xbc.to(dt_).split([H * P, self.G * N, self.G * N], dim=-1)
        x = x.view(B, C, H, P)
        b = b.view(B, C, self.G, N).repeat_interleave(H // self.G, 2)                   # to every head
        c = c.view(B, C, self.G, N).repeat_interleave(H // self.G, 2)
        dt = F.softplus(rest[1].to(dt_) + self.dt_bias)                                  # [B, C, H]
        A = -self.A_log.to(dt_).exp()
        S = torch.zeros(B, H, P, N, dtype=dt_, device=xbc.device) if state is None else state.to(dt_)
        scan = self.scan[form]
        if form == "recurrent" or (past and C == 1):
            ys = []
            for t in range(C):
                S = S * (dt[:, t] * A).exp()[..., None, None]
                u = (x[:, t] * dt[:, t, :, None])[..., None]                          # [B, H, P, 1]
                if form == "recurrent":
                    S = S + scan(u, b[:, t, :, None, :])                              # x (dt B)^T
                else:                                                                # the step: elementwise
                    S = S + u * b[:, t, :, None, :]
                ys.append(scan(S, c[:, t, :, :, None])[..., 0])                      # S C [B, H, P]
            y = torch.stack(ys, dim=1)
        else:
            y, S = self.ssd(x, dt, A, b, c, S, scan)
        y = y + x * self.D.to(dt_)[:, None]
        return y.reshape(B, C, H * P).to(xbc.dtype), self.keep(S, xbc)

    def ssd(self, x, dt, A, b, c, S, scan):
        """transformers' ``torch_forward``: chunks of Q_c (the last padded), the states passed
        between the chunks in one product over every pair of boundaries."""
        B, C, H, P = x.shape
        Q = self.Q_c
        n = -(-C // Q)
        pad = n * Q - C

        def chunks(t):
            return F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)).reshape(B, n, Q, *t.shape[2:])

        x, b, c, dA = chunks(x * dt[..., None]), chunks(b), chunks(c), chunks(dt * A)
        dA = dA.permute(0, 3, 1, 2)                                                      # [B, H, n, Q]
        cum = dA.cumsum(-1)
        L = segment_sum(dA).exp()                                                        # [B, H, n, Q, Q]
        scores = scan(c, b, "bclhn,bcshn->bclsh")                                         # C B^T
        y_diag = scan(scores * L.permute(0, 2, 3, 4, 1), x, "bclsh,bcshp->bclhp")         # (L . C B^T) X
        decay = (cum[..., -1:] - cum).exp()                                              # [B, H, n, Q]
        states = scan(b * decay.permute(0, 2, 3, 1)[..., None], x, "bclhn,bclhp->bchpn")  # B^T X
        states = torch.cat([S[:, None], states], dim=1)                                  # [B, n+1, H, P, N]
        between = segment_sum(F.pad(cum[..., -1], (1, 0))).exp()                         # [B, H, n+1, n+1]
        states = scan(between, states, "bhzc,bchpn->bzhpn")                              # between the chunks
        S = states[:, -1]
        y_off = scan(c, states[:, :-1], "bclhn,bchpn->bclhp") * cum.exp().permute(0, 2, 3, 1)[..., None]
        return (y_diag + y_off).reshape(B, n * Q, H, P)[:, :C], S

    def output(self, y, rest):
        return self.out_proj(l2norm(y * F.silu(rest[0])))


class Mamba1(Mixer):
    """Mamba's selective scan: ``in_proj`` gives x (convolved) and the gate z; ``x_proj`` dt (rank
    r_dt), B and C; ``dt_proj`` dt to the inner width; a state of N_s per channel."""

    def __init__(self, d: int, d_in: int, N_s: int, r_dt: int, K_c: int, state_dtype) -> None:
        self.d_in, self.N_s, self.r_dt = d_in, N_s, r_dt
        self.channels = d_in
        super().__init__(K_c, state_dtype)
        self.in_proj = nn.Linear(d, 2 * d_in, bias=False)
        self.x_proj = nn.Linear(d_in, r_dt + 2 * N_s, bias=False)
        self.dt_proj = nn.Linear(r_dt, d_in, bias=False)
        self.A_log = nn.Parameter(torch.empty(d_in, N_s))
        self.D = nn.Parameter(torch.empty(d_in))
        self.out_proj = nn.Linear(d_in, d, bias=False)

    def project(self, x):
        u, z = self.in_proj(x).split(self.d_in, dim=-1)
        return u, z

    def middle(self, u):
        dt, b, c = self.x_proj(u).split([self.r_dt, self.N_s, self.N_s], dim=-1)
        return self.dt_proj(dt), b, c

    def run_scan(self, u, z, mid, state, past, form):
        B, C, _ = u.shape
        dt_, scan = scan_dtype(u), self.scan[form]
        dt, b, c = mid
        dt = F.softplus(dt).to(dt_)                                                      # [B, C, d_in]
        A = -self.A_log.to(dt_).exp()
        b, c, x = b.to(dt_), c.to(dt_), u.to(dt_)
        S = torch.zeros(B, self.d_in, self.N_s, dtype=dt_, device=u.device) if state is None else state.to(dt_)
        ys = []
        for t in range(C):
            S = S * (dt[:, t, :, None] * A).exp()
            ux = (dt[:, t] * x[:, t])[:, :, None, None]                                  # [B, d_in, 1, 1]
            if form == "recurrent":
                S = S + scan(ux, b[:, t, None, None, :])[:, :, 0]                        # x (dt B)
            else:                                                                        # elementwise, as transformers
                S = S + ux[..., 0] * b[:, t, None, :]
            ys.append(scan(S[:, :, None, :], c[:, t, None, :, None])[:, :, 0, 0])       # S . C
        y = torch.stack(ys, dim=1) + x * self.D.to(dt_)
        return y.to(u.dtype), self.keep(S, u)

    def output(self, y, z):
        return self.out_proj(y * F.silu(z))


class Lightning(Mixer):
    """MiniMax's lightning attention: per head a state d_h x d_h decayed by a fixed rate per
    head; ``qkv_proj``, a sigmoid ``output_gate``, ``out_proj``; no convolution."""

    def __init__(self, d: int, h_q: int, d_h: int, Q_c: int, state_dtype) -> None:
        self.h, self.d_h, self.Q_c = h_q, d_h, Q_c
        super().__init__(None, state_dtype)
        self.qkv_proj = nn.Linear(d, 3 * h_q * d_h, bias=False)
        self.output_gate = nn.Linear(d, h_q * d_h, bias=False)
        self.out_proj = nn.Linear(h_q * d_h, d, bias=False)

    def project(self, x):
        return None, (self.qkv_proj(x), x)

    def run_scan(self, _, rest, mid, state, past, form):
        qkv = rest[0]
        B, C, _ = qkv.shape
        dt_, scan = scan_dtype(qkv), self.scan[form]
        q, k, v = (t.view(B, C, self.h, self.d_h).transpose(1, 2).to(dt_) for t in F.silu(qkv).chunk(3, -1))
        S = torch.zeros(B, self.h, self.d_h, self.d_h, dtype=dt_, device=qkv.device) if state is None else state.to(dt_)
        rate = torch.tensor([2.0 ** (-8 * (i + 1) / self.h) for i in range(self.h)], dtype=dt_, device=qkv.device)
        lam = (-rate).exp()[None, :, None, None]                        # a fixed decay per head (ALiBi slopes)
        if form == "recurrent" or past:          # over a cached state transformers steps token by token
            outs = []
            for t in range(C):
                S = lam * S + scan(k[:, :, t, :, None], v[:, :, t, None])                # k^T v
                outs.append(scan(q[:, :, t, None], S))                                   # q S
            o = torch.cat(outs, dim=2)
        else:
            o, S = self.blocks(q, k, v, S, lam, scan)
        return o.transpose(1, 2).reshape(B, C, -1).to(qkv.dtype), self.keep(S, qkv)

    def blocks(self, q, k, v, S, lam, scan):
        """Blocks of Q_c, the last one as long as what is left (no padding)."""
        outs = []
        rate = -lam.log()
        for start in range(0, q.shape[2], self.Q_c):
            qb, kb, vb = (t[:, :, start:start + self.Q_c] for t in (q, k, v))
            n = qb.shape[2]
            i = torch.arange(n, device=q.device, dtype=q.dtype)
            diag = (-(i[:, None] - i[None, :]) * rate).exp().masked_fill(i[:, None] < i[None, :], 0)
            intra = scan(scan(qb, kb.transpose(-1, -2)) * diag, vb)                       # (Q K^T . decay) V
            inter = scan(qb * (-(i + 1)[:, None] * rate).exp(), S)                       # (Q decay) KV
            S = (-n * rate).exp() * S + scan((kb * (-(n - 1 - i)[:, None] * rate).exp()).transpose(-1, -2), vb)
            outs.append(intra + inter)
        return torch.cat(outs, dim=2), S

    def output(self, y, rest):
        return self.out_proj(l2norm(y) * torch.sigmoid(self.output_gate(rest[1])))


class ShortConv(Mixer):
    """LFM2's gated short convolution: ``in_proj`` gives B, C and x; conv(B x) gated by C;
    ``out_proj``. Its only state is the convolution window."""

    def __init__(self, d: int, K_c: int, state_dtype) -> None:
        self.channels = d
        super().__init__(K_c, state_dtype)
        self.in_proj = nn.Linear(d, 3 * d, bias=False)
        self.out_proj = nn.Linear(d, d, bias=False)

    def project(self, x):
        b, c, h = self.in_proj(x).chunk(3, dim=-1)
        return b * h, c

    def run_scan(self, y, c, mid, state, past, form):
        return y, None

    def output(self, y, c):
        return self.out_proj(c * y)


def build(kind: str, d: int, lc, state_dtype) -> Mixer:
    """The mixer of a layer (``lc``: its ``LayerConfig``)."""
    if kind == "gdn":
        return GatedDeltaNet(d, lc.h_lk, lc.h_lv, lc.d_lk, lc.d_lv, lc.K_c, lc.Q_c, state_dtype)
    if kind == "kda":
        return KimiDeltaAttention(d, lc.h_lv, lc.d_lk, lc.d_lv, lc.K_c, lc.Q_c, state_dtype)
    if kind == "mamba2":
        return Mamba2(d, lc.h_m, lc.d_m, lc.G, lc.N_s, lc.K_c, lc.Q_c, state_dtype)
    if kind == "mamba1":
        return Mamba1(d, lc.d_in, lc.N_s, lc.r_dt, lc.K_c, state_dtype)
    if kind == "lightning":
        return Lightning(d, lc.h_q, lc.d_h, lc.Q_c, state_dtype)
    if kind == "shortconv":
        return ShortConv(d, lc.K_c, state_dtype)
    raise ValueError(f"no mixer {kind!r}")
