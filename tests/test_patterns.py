import pytest
import torch

import graphattn.patterns as P
from graphattn import (GlobalTokens, LapPEEncoder, image_graph, images_to_batch, patterns, sequence_graph,
                       sequences_to_batch, sinusoidal_pe, sinusoidal_pe_2d)
from graphattn.patterns import IMAGE_PATTERNS, SEQUENCE_PATTERNS

RULES = {  # brute-force definitions: may target i attend to source j?
    "full": lambda i, j, p: True,
    "window": lambda i, j, p: abs(i - j) <= p["window"],
    "stride": lambda i, j, p: (i - j) % p["stride"] == 0,
    "global": lambda i, j, p: i == j or i < p["num_global"] or j < p["num_global"],
    "causal": lambda i, j, p: j <= i,
}


def brute(length, patterns, **params):
    return {(j, i) for i in range(length) for j in range(length)
            if any(RULES[p](i, j, params) for p in patterns)}


def edge_set(edge_index):
    return set(map(tuple, edge_index.T.tolist()))


def check_well_formed(edge_index, num_nodes):
    """(2, E) int64, self-loops everywhere, no duplicates, sorted by (target, source)."""
    assert edge_index.dtype == torch.long and edge_index.dim() == 2 and edge_index.size(0) == 2
    src, dst = edge_index
    key = dst * max(num_nodes, 1) + src
    assert (key[1:] > key[:-1]).all()  # strictly increasing: sorted and no duplicates
    assert edge_set(torch.arange(num_nodes).repeat(2, 1)) <= edge_set(edge_index)
    if edge_index.numel():
        assert 0 <= int(edge_index.min()) and int(edge_index.max()) < num_nodes


def is_symmetric(edge_index):
    return edge_set(edge_index) == edge_set(edge_index.flip(0))


CASES = [
    ("full", {}),
    ("window", {"window": 0}), ("window", {"window": 2}), ("window", {"window": 50}),
    ("stride", {"stride": 1}), ("stride", {"stride": 3}), ("stride", {"stride": 40}),
    ("global", {"num_global": 1}), ("global", {"num_global": 4}),
    ("causal", {}),
    (["window", "global"], {"window": 1, "num_global": 2}),
    (("window", "stride"), {"window": 2, "stride": 4}),
    (["window", "stride", "global"], {"window": 1, "stride": 5, "num_global": 1}),
    (["causal", "window"], {"window": 1}),
]


@pytest.mark.parametrize("pattern,params", CASES)
@pytest.mark.parametrize("length", [1, 2, 11])
def test_sequence_patterns_match_definition(pattern, params, length):
    ei = sequence_graph(length, pattern, **params)
    check_well_formed(ei, length)
    pats = [pattern] if isinstance(pattern, str) else list(pattern)
    assert edge_set(ei) == brute(length, pats, **params)
    if "causal" not in pats:
        assert is_symmetric(ei)
    elif pats == ["causal"] and length > 1:
        assert not is_symmetric(ei)


@pytest.mark.parametrize("length", [1, 7, 32])
def test_sequence_edge_counts_closed_form(length):
    L = length
    assert sequence_graph(L, "full").size(1) == L * L
    assert sequence_graph(L, "causal").size(1) == L * (L + 1) // 2
    for w in range(0, 4):
        expected = sum(min(i + w, L - 1) - max(i - w, 0) + 1 for i in range(L))
        assert sequence_graph(L, "window", window=w).size(1) == expected
        if w < L:
            assert expected == L * (2 * w + 1) - w * (w + 1)
    for s in (1, 2, 5):  # residue r holds ceil((L - r) / s) positions, each sees its class
        expected = sum(((L - r + s - 1) // s) ** 2 for r in range(min(s, L)))
        assert sequence_graph(L, "stride", stride=s).size(1) == expected
    for g in range(1, min(L, 4) + 1):  # g rows of L, g columns, plus the other self-loops
        assert sequence_graph(L, "global", num_global=g).size(1) == 2 * g * L - g * g + L - g
    w, g = 1, 1
    combo = sequence_graph(L, ["window", "global"], window=w, num_global=g).size(1)
    overlap = sum(1 for i in range(L) for j in range(L) if abs(i - j) <= w and (i < g or j < g or i == j))
    assert combo == sequence_graph(L, "window", window=w).size(1) + \
        sequence_graph(L, "global", num_global=g).size(1) - overlap


def test_sequence_graph_edge_cases():
    assert sequence_graph(0, "full").shape == (2, 0)
    assert torch.equal(sequence_graph(5, "window", window=0), torch.arange(5).repeat(2, 1))
    # more global tokens than positions: every token is global, i.e. full attention
    assert torch.equal(sequence_graph(3, "global", num_global=10), sequence_graph(3, "full"))
    assert torch.equal(sequence_graph(6, "stride", stride=1), sequence_graph(6, "full"))
    assert torch.equal(sequence_graph(6, ["full", "full"]), sequence_graph(6, "full"))
    L = 50_000  # vectorised: window 7L - 12, global 3L - 2, overlap L + 6 (loops, 0 <-> 1..3)
    assert sequence_graph(L, ["window", "global"], window=3, num_global=1).size(1) == 9 * L - 20


@pytest.mark.parametrize("kwargs,match", [
    (dict(pattern="banded"), r"pattern must be one of \['full', 'window', 'stride', 'global', 'causal'\]"),
    (dict(pattern=[]), "pattern must be one of"),
    (dict(pattern=["window", 3], window=1), "pattern must be one of"),
    (dict(pattern="window"), "pattern 'window' needs window=int >= 0"),
    (dict(pattern="window", window=-1), "window must be an int >= 0, got -1"),
    (dict(pattern="window", window=1.5), "window must be an int"),
    (dict(pattern="stride"), "pattern 'stride' needs stride=int >= 1"),
    (dict(pattern="stride", stride=0), "stride must be an int >= 1, got 0"),
    (dict(pattern="global"), "num_global must be an int >= 1, got 0"),
    (dict(pattern="full", window=2), "window=2 is only used by pattern 'window'"),
    (dict(pattern="window", window=1, stride=2), "stride=2 is only used by pattern 'stride'"),
    (dict(pattern="full", num_global=1), "num_global=1 is only used by pattern 'global'"),
])
def test_sequence_graph_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sequence_graph(8, **kwargs)
    with pytest.raises(ValueError, match="length must be an int >= 0"):
        sequence_graph(-1)
    assert SEQUENCE_PATTERNS == ("full", "window", "stride", "global", "causal")


def grid_reference(h, w, k):
    r = k // 2
    return {(rs * w + cs, rt * w + ct) for rt in range(h) for ct in range(w)
            for rs in range(h) for cs in range(w) if abs(rs - rt) <= r and abs(cs - ct) <= r}


@pytest.mark.parametrize("h,w,k", [(5, 5, 3), (4, 7, 3), (6, 6, 5), (3, 3, 1), (2, 3, 7), (1, 1, 3)])
def test_grid_pattern_matches_receptive_field(h, w, k):
    ei = image_graph(h, w, "grid", kernel_size=k)
    check_well_formed(ei, h * w)
    assert edge_set(ei) == grid_reference(h, w, k)
    assert is_symmetric(ei)


def test_grid_in_degrees_interior_border_corner():
    h = w = 5
    deg = torch.bincount(image_graph(h, w, "grid")[1], minlength=h * w).view(h, w)
    assert deg[2, 2] == 9 and deg[0, 2] == 6 and deg[2, 4] == 6 and deg[0, 0] == 4 and deg[4, 4] == 4
    assert deg.sum() == 13 * 13  # per axis 2 + 3 + 3 + 3 + 2 sources
    deg5 = torch.bincount(image_graph(7, 7, "grid", kernel_size=5)[1]).view(7, 7)
    assert deg5[3, 3] == 25 and deg5[0, 0] == 9 and deg5[0, 3] == 15


def test_full_image_and_patches():
    assert torch.equal(image_graph(3, 4, "full"), sequence_graph(12, "full"))
    assert torch.equal(image_graph(8, 12, "grid", patch_size=4), image_graph(2, 3, "grid"))
    assert image_graph(8, 8, "full", patch_size=2).size(1) == 16 ** 2
    assert image_graph(0, 5, "grid").shape == (2, 0)
    assert IMAGE_PATTERNS == ("full", "grid")


@pytest.mark.parametrize("kwargs,match", [
    (dict(pattern="window"), r"pattern must be one of \['full', 'grid'\]"),
    (dict(pattern="grid", kernel_size=4), "kernel_size must be odd"),
    (dict(pattern="grid", kernel_size=0), "kernel_size must be an int >= 1"),
    (dict(pattern="full", patch_size=3), "patch_size=3 must divide height=8 and width=8"),
    (dict(pattern="full", patch_size=0), "patch_size must be an int >= 1"),
])
def test_image_graph_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        image_graph(8, 8, **kwargs)


def check_batch_never_crosses(batch):
    src, dst = batch.edge_index
    assert torch.equal(batch.batch[src], batch.batch[dst])


@pytest.mark.parametrize("pattern,params", [("full", {}), ("window", {"window": 1}),
                                            (["stride", "global"], {"stride": 2, "num_global": 1})])
def test_sequences_to_batch_varying_lengths(pattern, params):
    seqs = [torch.randn(n, 4) for n in (3, 7, 3, 1, 5)]
    batch = sequences_to_batch(seqs, pattern, **params)
    assert batch.num_graphs == 5 and batch.ptr.tolist() == [0, 3, 10, 13, 14, 19]
    assert torch.equal(batch.x, torch.cat(seqs))
    assert torch.equal(batch.pos, torch.cat([torch.arange(n) for n in (3, 7, 3, 1, 5)]))
    assert torch.equal(batch.pe, torch.cat([sinusoidal_pe(n, 4) for n in (3, 7, 3, 1, 5)]))
    check_batch_never_crosses(batch)
    for b, data in enumerate(batch.to_data_list()):  # each graph is its own sequence_graph
        assert torch.equal(data.edge_index, sequence_graph(seqs[b].size(0), pattern, **params))


def test_sequences_to_batch_tensor_input_and_options():
    x = torch.randn(3, 6, 5)
    batch = sequences_to_batch(x, "window", pe=None, window=2)
    assert batch.x.shape == (18, 5) and "pe" not in batch and batch.batch.bincount().tolist() == [6, 6, 6]
    check_batch_never_crosses(batch)
    assert sequences_to_batch(x, pe_channels=8).pe.shape == (18, 8)
    assert sequences_to_batch(x).pe.shape == (18, 6)  # F = 5 rounded up to even
    with pytest.raises(ValueError, match="pe_channels divisible by 2, got 5"):
        sequences_to_batch(x, pe_channels=5)
    with pytest.raises(ValueError, match=r"x must have shape \(B, L, F\)"):
        sequences_to_batch(torch.randn(3, 6))
    with pytest.raises(ValueError, match="same feature size"):
        sequences_to_batch([torch.randn(2, 3), torch.randn(2, 4)], pe=None)
    with pytest.raises(ValueError, match="pe must be one of"):
        sequences_to_batch(x, pe="learned")
    with pytest.raises(ValueError, match="window=1 is only used"):
        sequences_to_batch(x, "full", pe=None, window=1)


def test_images_to_batch_pixels():
    images = torch.randn(2, 3, 4, 5)
    batch = images_to_batch(images, "grid", pe_channels=8)
    assert batch.num_graphs == 2 and batch.x.shape == (40, 3)
    for b in range(2):
        for r in range(4):
            for c in range(5):
                node = b * 20 + r * 5 + c
                assert torch.equal(batch.x[node], images[b, :, r, c])
                assert batch.pos[node].tolist() == [r, c]
    assert torch.equal(batch.pe, sinusoidal_pe_2d(4, 5, 8).repeat(2, 1))
    assert batch.edge_index.size(1) == 2 * image_graph(4, 5, "grid").size(1)
    check_batch_never_crosses(batch)
    assert images_to_batch(images).pe.shape == (40, 4)  # RGB: 3 channels -> 4-wide 2-D encoding
    assert images_to_batch(images[:, :1]).pe.shape == (40, 4)  # grayscale
    with pytest.raises(ValueError, match="pe_channels divisible by 4, got 3"):
        images_to_batch(images, pe_channels=3)
    with pytest.raises(ValueError, match=r"images must be a \(B, C, H, W\) tensor"):
        images_to_batch(images[0])


def test_images_to_batch_patches():
    images = torch.arange(2 * 2 * 4 * 6, dtype=torch.float32).view(2, 2, 4, 6)
    batch = images_to_batch(images, "full", patch_size=2, pe=None)
    assert batch.x.shape == (2 * 6, 2 * 2 * 2) and batch.pos.shape == (12, 2)
    node = 1 * 6 + 1 * 3 + 2  # image 1, patch row 1, patch column 2
    expected = images[1, :, 2:4, 4:6].permute(1, 2, 0).reshape(-1)  # (row, col, channel)
    assert torch.equal(batch.x[node], expected) and batch.pos[node].tolist() == [1, 2]
    assert batch.edge_index.size(1) == 2 * 36
    check_batch_never_crosses(batch)
    uint8 = images_to_batch(torch.zeros(1, 1, 4, 4, dtype=torch.uint8), pe_channels=4)
    assert uint8.pe.dtype == torch.float32


def test_huge_patterns_and_encodings_are_refused_before_allocating(monkeypatch):
    with pytest.raises(ValueError, match=r"'full' on 100,000 tokens needs 10,000,000,000 edges"):
        patterns.sequence_graph(10 ** 5)
    with pytest.raises(ValueError, match="MAX_EDGES"):
        patterns.image_graph(1000, 1000, "full")
    monkeypatch.setattr(patterns, "MAX_EDGES", 20)
    assert patterns.sequence_graph(4).shape == (2, 16)  # at the cap: fine
    with pytest.raises(ValueError, match=r"'grid' \(kernel 5\) on a 5 x 5 grid"):
        patterns.image_graph(5, 5, "grid", kernel_size=5)
    with pytest.raises(ValueError, match="MAX_PE_ELEMENTS"):
        sinusoidal_pe(10 ** 10, 64)
    with pytest.raises(ValueError, match="MAX_PE_ELEMENTS"):
        sinusoidal_pe_2d(10 ** 5, 10 ** 5, 4)


def test_window_stride_kernel_wider_than_the_input_equal_full():
    full = sequence_graph(4)
    assert torch.equal(sequence_graph(4, "window", window=2 ** 63 - 1), full)
    assert torch.equal(sequence_graph(4, "stride", stride=2 ** 63 - 3), sequence_graph(4, "stride", stride=4))
    assert torch.equal(image_graph(2, 3, "grid", kernel_size=2 ** 64 + 1), image_graph(2, 3, "full"))
    assert torch.equal(sinusoidal_pe(5, torch.tensor(4)), sinusoidal_pe(5, 4))
    with pytest.raises(ValueError, match="base must be a finite number"):
        sinusoidal_pe(5, 4, base="10000")


def test_full_image_pattern_too_large_speaks_of_pixels_or_patches():
    with pytest.raises(ValueError, match=r"on 90,000 pixels \(300x300\)"):
        image_graph(300, 300, "full")
    with pytest.raises(ValueError, match=r"on 90,000 patches .*larger patch_size"):
        image_graph(600, 600, "full", patch_size=2)


@pytest.mark.parametrize("length", [0, 1, 5, 9])
def test_causal_keeps_the_patterns_edges_with_source_not_after_target(length):
    def mask(ei):
        m = torch.zeros(length, length, dtype=torch.bool)
        m[ei[1], ei[0]] = True
        return m

    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    causal_window = mask(sequence_graph(length, "window", window=2, causal=True))
    assert torch.equal(causal_window, (i - j >= 0) & (i - j <= 2))  # a causal sliding window
    assert torch.equal(sequence_graph(length, "full", causal=True), sequence_graph(length, "causal"))
    union = mask(sequence_graph(length, ["window", "global"], window=1, num_global=2, causal=True))
    assert torch.equal(union, mask(sequence_graph(length, ["window", "global"], window=1, num_global=2)) & (j <= i))
    with pytest.raises(TypeError, match="causal must be True or False"):
        sequence_graph(length, "full", causal=1)


def test_causal_patterns_are_built_causal_so_the_size_limit_counts_their_own_edges(monkeypatch):
    monkeypatch.setattr(P, "MAX_EDGES", 50)
    assert sequence_graph(10, "window", window=4, causal=True).size(1) == 40  # the two-sided window has 70
    assert sequence_graph(10, "stride", stride=2, causal=True).size(1) == 30  # (two-sided: 50)
    with pytest.raises(ValueError, match=r"pattern 'window' \(causal\) on 20 tokens needs"):
        sequence_graph(20, "window", window=4, causal=True)


def test_images_to_batch_empty():
    with pytest.raises(ValueError, match=r"no images \(B = 0\)"):
        images_to_batch(torch.zeros(0, 4, 4, 4))
    with pytest.raises(ValueError, match=r"no images \(B = 0\)"):
        images_to_batch(torch.zeros(0, 4, 4, 4), pe=None)


def test_small_argument_checks():
    with pytest.raises(TypeError, match="dtype"):
        sinusoidal_pe(3, 4, dtype=torch.int64)
    with pytest.raises(TypeError, match="dtype"):
        sinusoidal_pe_2d(2, 2, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match="hidden_channels"):
        LapPEEncoder(3, 8, hidden_channels=0)
    for bad in (1.5, True, 0):
        with pytest.raises(ValueError, match="num_tokens"):
            GlobalTokens(4, bad)
    with pytest.raises(ValueError, match="kernel_size"):
        image_graph(3, 3, "full", kernel_size="x")
    assert image_graph(3, 3, "full", kernel_size=4).shape == (2, 81)  # unused by "full": any size
    with pytest.raises(TypeError, match="device"):
        sequences_to_batch(torch.randn(2, 3, 4), device="cpu")
