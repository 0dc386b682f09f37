"""Parity of the sequence layers: MultiheadAttention, Transformer stacks, RNN/LSTM/GRU and their cells."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import loom
from tests.nn.harness import ModuleCase, build_pair, check_module, const, randn

E, H = 8, 2


def _causal(n: int) -> np.ndarray:
    return np.triu(np.ones((n, n), dtype=bool), 1)


def _pad_mask(n: int, s: int) -> np.ndarray:
    m = np.zeros((n, s), dtype=bool)
    m[0, -2:] = True
    m[-1, -1] = True
    return m


def _float_mask(rows: int, l: int, s: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    return rng.uniform(-2.0, 0.0, size=(rows, l, s)).astype(np.float32)


def self_attn(m, x, **kw):
    return m(x, x, x, **kw)


MHA = [
    ModuleCase("mha", lambda lib: lib.nn.MultiheadAttention(E, H), (randn(5, 3, E), randn(6, 3, E), randn(6, 3, E))),
    ModuleCase("mha_self", lambda lib: lib.nn.MultiheadAttention(E, H), (randn(5, 3, E),), call=self_attn),
    ModuleCase("mha_batch_first", lambda lib: lib.nn.MultiheadAttention(E, H, batch_first=True),
               (randn(3, 5, E), randn(3, 4, E), randn(3, 4, E))),
    ModuleCase("mha_key_padding_mask", lambda lib: lib.nn.MultiheadAttention(E, H),
               (randn(5, 3, E), const(_pad_mask(3, 5))),
               call=lambda m, x, kpm: m(x, x, x, key_padding_mask=kpm)),
    ModuleCase("mha_causal_bool_mask", lambda lib: lib.nn.MultiheadAttention(E, H, batch_first=True),
               (randn(2, 5, E), const(_causal(5))), call=lambda m, x, am: m(x, x, x, attn_mask=am)),
    ModuleCase("mha_float_3d_mask_and_padding", lambda lib: lib.nn.MultiheadAttention(E, H),
               (randn(4, 3, E), randn(5, 3, E), const(_float_mask(3 * H, 4, 5)), const(_pad_mask(3, 5))),
               call=lambda m, q, kv, am, kpm: m(q, kv, kv, attn_mask=am, key_padding_mask=kpm)),
    ModuleCase("mha_no_weights", lambda lib: lib.nn.MultiheadAttention(E, H),
               (randn(5, 3, E), const(_causal(5))),
               call=lambda m, x, am: m(x, x, x, attn_mask=am, need_weights=False, is_causal=True)),
    ModuleCase("mha_per_head_weights", lambda lib: lib.nn.MultiheadAttention(E, H),
               (randn(5, 2, E),), call=lambda m, x: m(x, x, x, average_attn_weights=False)),
    ModuleCase("mha_kdim_vdim", lambda lib: lib.nn.MultiheadAttention(E, H, kdim=5, vdim=3),
               (randn(4, 2, E), randn(6, 2, 5), randn(6, 2, 3))),
    ModuleCase("mha_bias_kv_zero_attn", lambda lib: lib.nn.MultiheadAttention(E, H, add_bias_kv=True,
                                                                               add_zero_attn=True),
               (randn(4, 2, E), const(_pad_mask(2, 4)), const(_causal(4))),
               call=lambda m, x, kpm, am: m(x, x, x, key_padding_mask=kpm, attn_mask=am)),
    ModuleCase("mha_no_bias", lambda lib: lib.nn.MultiheadAttention(E, H, bias=False), (randn(4, 2, E),),
               call=self_attn),
    ModuleCase("mha_unbatched", lambda lib: lib.nn.MultiheadAttention(E, H), (randn(4, E), randn(6, E), randn(6, E))),
    ModuleCase("mha_dropout_eval", lambda lib: lib.nn.MultiheadAttention(E, H, dropout=0.5), (randn(4, 2, E),),
               call=self_attn, modes=("eval",)),
]


def _enc_layer(lib, **kw):
    kw.setdefault("dropout", 0.0)
    return lib.nn.TransformerEncoderLayer(E, H, dim_feedforward=16, **kw)


def _enc_stack(lib):
    layer = _enc_layer(lib, batch_first=True)
    return lib.nn.TransformerEncoder(layer, 2, norm=lib.nn.LayerNorm(E))


def _dec_layer(lib, **kw):
    return lib.nn.TransformerDecoderLayer(E, H, dim_feedforward=16, dropout=0.0, **kw)


def _transformer(lib):
    return lib.nn.Transformer(d_model=E, nhead=H, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=16,
                              dropout=0.0, batch_first=True)


TRANSFORMER = [
    ModuleCase("encoder_layer", lambda lib: _enc_layer(lib), (randn(5, 3, E),)),
    ModuleCase("encoder_layer_norm_first_gelu", lambda lib: _enc_layer(lib, norm_first=True, activation="gelu"),
               (randn(5, 3, E),)),
    ModuleCase("encoder_layer_batch_first_masks", lambda lib: _enc_layer(lib, batch_first=True),
               (randn(3, 5, E), const(_causal(5)), const(_pad_mask(3, 5))),
               call=lambda m, x, am, kpm: m(x, src_mask=am, src_key_padding_mask=kpm)),
    ModuleCase("encoder_layer_dropout_eval", lambda lib: _enc_layer(lib, dropout=0.1), (randn(4, 2, E),),
               modes=("eval",)),
    ModuleCase("encoder_layer_no_bias", lambda lib: _enc_layer(lib, bias=False), (randn(4, 2, E),)),
    ModuleCase("encoder_stack", _enc_stack, (randn(2, 5, E), const(_causal(5))),
               call=lambda m, x, am: m(x, mask=am, is_causal=True)),
    ModuleCase("decoder_layer", lambda lib: _dec_layer(lib), (randn(4, 2, E), randn(6, 2, E), const(_causal(4))),
               call=lambda m, t, mem, am: m(t, mem, tgt_mask=am)),
    ModuleCase("decoder_layer_norm_first", lambda lib: _dec_layer(lib, norm_first=True, batch_first=True),
               (randn(2, 4, E), randn(2, 6, E))),
    ModuleCase("transformer", _transformer, (randn(2, 6, E), randn(2, 4, E), const(_causal(4))),
               call=lambda m, s, t, am: m(s, t, tgt_mask=am)),
]


RNN = [
    ModuleCase("rnn_tanh", lambda lib: lib.nn.RNN(4, 6), (randn(5, 3, 4),)),
    ModuleCase("rnn_relu_2layer_h0", lambda lib: lib.nn.RNN(4, 6, num_layers=2, nonlinearity="relu"),
               (randn(5, 3, 4), randn(2, 3, 6))),
    ModuleCase("rnn_bidirectional_batch_first", lambda lib: lib.nn.RNN(4, 5, bidirectional=True, batch_first=True),
               (randn(3, 5, 4),)),
    ModuleCase("lstm", lambda lib: lib.nn.LSTM(4, 6), (randn(5, 3, 4),)),
    ModuleCase("lstm_2layer_batch_first_h0c0", lambda lib: lib.nn.LSTM(4, 6, num_layers=2, batch_first=True),
               (randn(3, 5, 4), randn(2, 3, 6), randn(2, 3, 6)), call=lambda m, x, h, c: m(x, (h, c))),
    ModuleCase("lstm_bidirectional_2layer", lambda lib: lib.nn.LSTM(3, 4, num_layers=2, bidirectional=True),
               (randn(4, 2, 3),)),
    ModuleCase("lstm_no_bias", lambda lib: lib.nn.LSTM(3, 4, bias=False), (randn(4, 2, 3),)),
    ModuleCase("lstm_proj", lambda lib: lib.nn.LSTM(3, 5, num_layers=2, proj_size=2), (randn(4, 2, 3),)),
    ModuleCase("lstm_unbatched", lambda lib: lib.nn.LSTM(3, 4), (randn(5, 3), randn(1, 4), randn(1, 4)),
               call=lambda m, x, h, c: m(x, (h, c))),
    ModuleCase("lstm_dropout_eval", lambda lib: lib.nn.LSTM(3, 4, num_layers=2, dropout=0.5), (randn(4, 2, 3),),
               modes=("eval",)),
    ModuleCase("gru", lambda lib: lib.nn.GRU(4, 6), (randn(5, 3, 4),)),
    ModuleCase("gru_2layer_batch_first_h0", lambda lib: lib.nn.GRU(4, 6, num_layers=2, batch_first=True),
               (randn(3, 5, 4), randn(2, 3, 6))),
    ModuleCase("gru_bidirectional", lambda lib: lib.nn.GRU(3, 4, bidirectional=True, num_layers=2),
               (randn(4, 2, 3),)),
    ModuleCase("gru_unbatched_no_bias", lambda lib: lib.nn.GRU(3, 4, bias=False), (randn(5, 3),)),
    ModuleCase("rnn_cell", lambda lib: lib.nn.RNNCell(4, 5), (randn(3, 4), randn(3, 5))),
    ModuleCase("rnn_cell_relu_unbatched", lambda lib: lib.nn.RNNCell(4, 5, nonlinearity="relu"), (randn(4),)),
    ModuleCase("lstm_cell", lambda lib: lib.nn.LSTMCell(4, 5), (randn(3, 4), randn(3, 5), randn(3, 5)),
               call=lambda m, x, h, c: m(x, (h, c))),
    ModuleCase("lstm_cell_no_state", lambda lib: lib.nn.LSTMCell(4, 5, bias=False), (randn(3, 4),)),
    ModuleCase("gru_cell", lambda lib: lib.nn.GRUCell(4, 5), (randn(3, 4), randn(3, 5))),
]


@pytest.mark.parametrize("case", MHA + TRANSFORMER + RNN, ids=str)
def test_sequence_parity(case):
    check_module(case)


def test_mha_parameter_names_match_torch():
    tm, lm = build_pair(ModuleCase("names", lambda lib: lib.nn.MultiheadAttention(E, H, add_bias_kv=True)))
    assert [n for n, _ in lm.named_parameters()] == [n for n, _ in tm.named_parameters()] == \
        ["in_proj_weight", "in_proj_bias", "bias_k", "bias_v", "out_proj.weight", "out_proj.bias"]


def test_lstm_parameter_names_and_gate_order():
    _, lm = build_pair(ModuleCase("names", lambda lib: lib.nn.LSTM(3, 4, num_layers=2, bidirectional=True)))
    names = [n for n, _ in lm.named_parameters()]
    assert names[:8] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l0_reverse",
                         "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse"]
    assert lm.weight_ih_l1.shape == (16, 8)  # 4 gates x hidden, input = 2 directions x hidden.
    # Gate order i, f, g, o: with only the forget-gate bias large and the rest zero, c stays c0.
    lstm = loom.nn.LSTM(1, 1)
    with loom.no_grad():
        for p in lstm.parameters():
            p.zero_()
        lstm.bias_ih_l0.copy_(loom.tensor([-50.0, 50.0, 0.0, 0.0]))
    _, (_, c) = lstm(loom.ones(1, 1, 1), (loom.zeros(1, 1, 1), loom.full((1, 1, 1), 0.7)))
    assert abs(c.item() - 0.7) < 1e-6


def test_rnn_dropout_between_layers_in_training():
    loom.manual_seed(0)
    lstm = loom.nn.LSTM(3, 4, num_layers=2, dropout=0.9)
    x = loom.randn(6, 2, 3)
    a, _ = lstm(x)
    b, _ = lstm(x)
    assert not np.allclose(a.detach().numpy(), b.detach().numpy())  # Different dropout masks.
    lstm.eval()
    c, _ = lstm(x)
    d, _ = lstm(x)
    np.testing.assert_array_equal(c.detach().numpy(), d.detach().numpy())


def test_rnn_errors():
    lstm = loom.nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(loom.ShapeError, match="input_size"):
        lstm(loom.randn(5, 2, 7))
    with pytest.raises(loom.ShapeError, match=r"hidden\[0\] size \(2, 2, 4\)"):
        lstm(loom.randn(5, 2, 3), (loom.zeros(1, 2, 4), loom.zeros(2, 2, 4)))
    with pytest.raises(ValueError, match="proj_size"):
        loom.nn.GRU(3, 4, proj_size=2)
    with pytest.raises(ValueError, match="nonlinearity"):
        loom.nn.RNN(3, 4, nonlinearity="gelu")


def test_mha_errors():
    with pytest.raises(ValueError, match="divisible"):
        loom.nn.MultiheadAttention(10, 3)
    mha = loom.nn.MultiheadAttention(E, H)
    x = loom.randn(4, 2, E)
    with pytest.raises(loom.ShapeError, match="2-d attn_mask"):
        mha(x, x, x, attn_mask=loom.zeros(3, 4))
    with pytest.raises(loom.LoomError, match="is_causal"):
        mha(x, x, x, is_causal=True)


def test_transformer_square_subsequent_mask_matches_torch():
    want = torch.nn.Transformer.generate_square_subsequent_mask(5).numpy()
    got = loom.nn.Transformer.generate_square_subsequent_mask(5).numpy()
    np.testing.assert_array_equal(got, want)


def test_transformer_encoder_layers_are_independent_copies():
    enc = loom.nn.TransformerEncoder(loom.nn.TransformerEncoderLayer(E, H, 16), num_layers=3)
    ids = {id(layer.linear1.weight) for layer in enc.layers}
    assert len(ids) == 3
    assert len(list(enc.parameters())) == 3 * len(list(enc.layers[0].parameters()))
    assert repr(enc).count("TransformerEncoderLayer") == 1  # Identical layers collapse: "(0-2): 3 x ..."
    assert "(0-2): 3 x TransformerEncoderLayer(" in repr(enc)
