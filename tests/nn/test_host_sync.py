"""No host reads in a forward or backward: the second call with the same graph reads nothing.

On a GPU every read of a tensor's values by the host (``.item()``, ``bool(t)``, ``int(t)``,
``.tolist()``, an output whose size depends on the values: ``nonzero``, boolean-mask indexing,
``unique``, ``bincount``, ``repeat_interleave`` without ``output_size``; a tensor made from
Python data, which is a blocking host-to-device copy) makes the host wait for the device. Facts
about a graph (index ranges, graph counts, sortedness, its CSR view, the global-token edges, the
distinct edge-feature rows) are read once per graph tensor and remembered; NaN/inf scans of
float inputs run only where they wait for no device (see ``docs/reliability.md``).

These CPU tests count the host reads a model makes (:class:`HostReads`, a torch dispatch mode
plus a torch function mode) during the *second* forward + backward with the same tensors, with
every device-dependent choice made as for a CUDA tensor (:func:`as_on_cuda`), and require none.
The last test runs a training step on a GPU under ``torch.cuda.set_sync_debug_mode("error")``.
"""
import traceback

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch_geometric.data import Batch, Data

import graphattn.nn.dropout
import graphattn.utils.memo
from graphattn import GraphSelfAttention
from graphattn.data.featurize import ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS
from graphattn.nn.encodings import pe_inputs
from graphattn.nn.models import GraphClassifier, NodeClassifier
from graphattn.ops import extension
from graphattn.transforms import AddLaplacianPE
from graphattn.utils import validation

aten = torch.ops.aten

#: aten ops that read values on the host (``_local_scalar_dense``: item / bool / int / float /
#: index), size their output by the values (a device sync on CUDA), or copy Python data to the
#: device (``lift_fresh``: ``torch.tensor(...)``, a blocking host-to-device copy on CUDA)
READ_OPS = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
            aten.bincount.default, aten._unique.default, aten._unique2.default, aten.unique_dim.default,
            aten.unique_consecutive.default, aten.equal.default, aten.lift_fresh.default}
#: indexing ops that sync when an index is a boolean mask
INDEX_OPS = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
#: Tensor methods that hand values to Python or copy them to the host
READ_METHODS = {"tolist", "numpy", "__array__", "cpu"}


def _where() -> str:
    """The package's frames of the current stack, innermost last (where a read comes from)."""
    frames = [f for f in traceback.extract_stack() if "/graphattn/" in f.filename.replace("\\", "/")]
    return "".join(traceback.format_list(frames[-8:])) or "".join(traceback.format_stack(limit=12))


class _Ops(TorchDispatchMode):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        read = func in READ_OPS
        if func is aten.repeat_interleave.Tensor:
            read = kwargs.get("output_size") is None
        elif func in INDEX_OPS:
            read = any(t is not None and t.dtype in (torch.bool, torch.uint8) for t in args[1])
        if read:
            self.log.append((str(func), _where()))
        return func(*args, **kwargs)


class _Methods(TorchFunctionMode):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in READ_METHODS:  # (``.to(device)`` is not counted: here every device is the CPU)
            self.log.append((f"Tensor.{name}", _where()))
        return func(*args, **kwargs)


class HostReads:
    """Context manager: ``reads`` lists ``(what, where)`` for every host read inside it."""

    def __enter__(self):
        self.reads = []
        self._modes = [_Methods(self.reads), _Ops(self.reads)]
        for m in self._modes:
            m.__enter__()
        return self

    def __exit__(self, *exc):
        for m in reversed(self._modes):
            m.__exit__(*exc)

    def report(self) -> str:
        return "\n".join(f"{what} at\n{where}" for what, where in self.reads)


def second_call_reads(step) -> HostReads:
    """Run ``step`` once (it may read: the graph is new), then again counting host reads."""
    step()
    with HostReads() as seen:
        step()
    return seen


@pytest.fixture
def as_on_cuda(monkeypatch):
    """Every device-dependent choice made as for a CUDA tensor, except the kernels: no per-call
    NaN/inf scans (those run on CPU tensors only, :data:`validation.VALUE_CHECK_DEVICES`) and
    torch's own dropout (:func:`graphattn.nn.dropout.dropout` draws its seed from the CPU
    generator with one host read of a CPU tensor, a route only CPU tensors take)."""
    monkeypatch.setattr(validation, "VALUE_CHECK_DEVICES", ())
    monkeypatch.setattr(graphattn.nn.dropout, "dropout", lambda x, p=0.5, training=True: F.dropout(x, p, training))


def ring(n: int) -> torch.Tensor:
    i = torch.arange(n)
    return torch.stack([torch.cat([i, (i + 1) % n]), torch.cat([(i + 1) % n, i])])  # (2, 2n) both ways


def molecule_batch() -> Batch:
    """Four small ring molecules with categorical atom/bond codes and a Laplacian PE (k = 8 >= N
    for some, so padded columns are masked), as the molecule recipes feed the model."""
    torch.manual_seed(0)
    graphs = []
    for n in (5, 7, 9, 6):
        ei = ring(n)
        graphs.append(AddLaplacianPE(8)(Data(
            x=torch.stack([torch.randint(0, v, (n,)) for v in ATOM_FEATURE_DIMS], 1), edge_index=ei,
            edge_attr=torch.stack([torch.randint(0, v, (ei.size(1),)) for v in BOND_FEATURE_DIMS], 1),
            y=torch.randint(0, 2, (1, 3)).float())))
    return Batch.from_data_list(graphs)


def node_graph(n: int = 40):
    torch.manual_seed(1)
    ei = torch.cat([ring(n), torch.randint(0, n, (2, 3 * n))], 1)
    return torch.randn(n, 16), ei, torch.randint(0, 4, (n,))


IMPLS = ["chunked", pytest.param("fused", marks=pytest.mark.skipif(
    not extension.fused_available(), reason="the C++ extension could not be built"))]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("edge_dim", [None, 8])
def test_layer_second_call_reads_nothing(impl, edge_dim, as_on_cuda):
    x, ei, _ = node_graph()
    x.requires_grad_(True)
    ea = torch.randn(ei.size(1), 8) if edge_dim else None
    layer = GraphSelfAttention(16, 8, heads=4, edge_dim=edge_dim, impl=impl)

    def step():
        layer(x, ei, ea).square().sum().backward()

    seen = second_call_reads(step)
    assert seen.reads == [], seen.report()


@pytest.mark.parametrize("options", [dict(score="additive", dropout=0.2), dict(score="gat", edge_dim=8,
                                     add_self_loops=True), dict(dropout=0.2, weights_grad=True),
                                     dict(normalization="relu")], ids=["additive", "gat-loops", "alpha-grad", "relu"])
def test_other_layer_paths_read_nothing(options, as_on_cuda):
    x, ei, _ = node_graph()
    ei = torch.cat([ei, torch.tensor([[0, 1], [0, 1]])], 1)  # self-loops: replaced by add_self_loops
    ea = torch.randn(ei.size(1), 8) if options.get("edge_dim") else None
    layer = GraphSelfAttention(16, 8, heads=4, **options)

    def step():
        out, (_, alpha) = layer(x, ei, ea, return_attention_weights=True)
        (out.square().sum() + alpha.sum()).backward()

    seen = second_call_reads(step)
    assert seen.reads == [], seen.report()


@pytest.mark.parametrize("with_batch", [True, False], ids=["batch", "edge_index_only"])
def test_complete_graphs_on_sdpa_read_nothing(as_on_cuda, with_batch):
    sizes, edges, ids = (4, 6, 5), [], []
    for b, n in enumerate(sizes):
        nodes = torch.arange(n) + sum(sizes[:b])
        edges.append(torch.stack([nodes.repeat_interleave(n), nodes.repeat(n)]))
        ids.append(torch.full((n,), b))
    ei, batch, x = torch.cat(edges, 1), torch.cat(ids), torch.randn(sum(sizes), 16)
    layer = GraphSelfAttention(16, 8, heads=4, impl="dense")
    seen = second_call_reads(lambda: layer(x, ei, batch=batch if with_batch else None).sum().backward())
    assert seen.reads == [], seen.report()


def molecule_model() -> GraphClassifier:
    torch.manual_seed(0)
    return GraphClassifier(len(ATOM_FEATURE_DIMS), 32, 3, num_layers=2, heads=4, num_global_tokens=1, pe_dim=8,
                           pe_kind="laplacian", edge_dim=len(BOND_FEATURE_DIMS), dropout=0.25,
                           node_vocab_sizes=list(ATOM_FEATURE_DIMS), edge_vocab_sizes=list(BOND_FEATURE_DIMS))


def molecule_step(model, batch):
    logits = model(batch.x, batch.edge_index, batch.batch, batch.edge_attr, num_graphs=batch.num_graphs,
                   **pe_inputs(batch))
    F.binary_cross_entropy_with_logits(logits, batch.y).backward()


def test_molecule_training_step_reads_nothing(as_on_cuda):
    """GraphClassifier as the molecule recipes build it (categorical atoms and bonds, one global
    token, Laplacian PE with random sign flips, dropout), forward + loss + backward; the optimizer
    step is torch's (Adam keeps its step count in a CPU tensor, or on the GPU with capturable=True)."""
    model, batch = molecule_model().train(), molecule_batch()
    seen = second_call_reads(lambda: molecule_step(model, batch))
    assert seen.reads == [], seen.report()


@pytest.mark.parametrize("options", [dict(), dict(self_loops=True, propagation=2, gcn_weight=0.5,
                                                  num_global_tokens=1)], ids=["plain", "loops-appnp-gcn-tokens"])
def test_node_classifier_step_reads_nothing(options, as_on_cuda):
    x, ei, y = node_graph()
    model = NodeClassifier(16, 32, 4, num_layers=2, heads=4, dropout=0.2, **options).train()
    seen = second_call_reads(lambda: F.cross_entropy(model(x, ei), y).backward())
    assert seen.reads == [], seen.report()


def test_the_count_sees_each_kind_of_read():
    t = torch.arange(6) - 2
    with HostReads() as seen:
        bool(t.sum() > 0), int(t.max()), float(t[0]), t[1].item(), t.tolist()
        torch.stack(torch.aminmax(t)).tolist()  # the range check's one read
        t[t > 0], t.nonzero(), torch.unique(t), torch.bincount(t.abs(), minlength=4)
        torch.repeat_interleave(t.abs()), torch.tensor([1, 2]), t.cpu()
    what = [w for w, _ in seen.reads]
    assert what.count("aten._local_scalar_dense.default") == 4 and what.count("Tensor.tolist") == 2
    for op in ("aten.index.Tensor", "aten.nonzero.default", "aten._unique2.default", "aten.bincount.default",
               "aten.repeat_interleave.Tensor", "aten.lift_fresh.default", "Tensor.cpu"):
        assert op in what, (op, what)
    with HostReads() as quiet:
        torch.repeat_interleave(t.abs(), output_size=9), t[t.abs()], t.index_select(0, t.abs()), torch.aminmax(t)
    assert quiet.reads == [], quiet.report()


def test_without_the_remembered_facts_a_step_reads_again(as_on_cuda, monkeypatch):
    """What the tests above guard: with nothing remembered per graph tensor (index ranges, graph
    counts, distinct bond rows, token edges) the molecule step reads on every call, and with the
    CPU's value scans on, the layer reads once per call (its NaN/inf check)."""
    monkeypatch.setattr(graphattn.utils.memo, "MEMO_SIZE", 0)  # remembers nothing
    model, batch = molecule_model().train(), molecule_batch()
    seen = second_call_reads(lambda: molecule_step(model, batch))
    where = "".join(w for _, w in seen.reads)
    assert len(seen.reads) >= 5 and "unique_rows" in where and "check_batch" in where, seen.report()
    monkeypatch.undo()  # the CPU's own choices again (as_on_cuda's patches too): value scans on
    x, ei, _ = node_graph()
    layer = GraphSelfAttention(16, 8, heads=4)
    seen = second_call_reads(lambda: layer(x, ei).sum().backward())
    assert [w for w, _ in seen.reads] == ["aten._local_scalar_dense.default"], seen.report()
    assert "check_all_finite" in seen.reads[0][1]


def test_value_checks_off_the_cpu_run_under_anomaly_detection(as_on_cuda):
    """Where a scan would be a device sync (here: VALUE_CHECK_DEVICES emptied, as for CUDA) a NaN
    input is not scanned per call; anomaly detection turns the scans (and their clear error) on."""
    x, ei, _ = node_graph()
    x[3, 2] = float("nan")
    layer = GraphSelfAttention(16, 8, heads=4)
    assert torch.isnan(layer(x, ei)).any()  # not scanned: NaN in, NaN out
    with torch.autograd.set_detect_anomaly(True), pytest.raises(ValueError, match="x contains NaN"):
        layer(x, ei)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("which", ["molecules", "nodes", "layer-dropout-edge-features"])
def test_cuda_training_step_never_syncs(which):
    """A whole training step (forward, loss, backward, Adam(capturable=True)) on the GPU, after one
    step that met the graph, under ``torch.cuda.set_sync_debug_mode("error")``: any host sync raises."""
    dev = torch.device("cuda")
    if which == "molecules":
        model, batch = molecule_model().to(dev).train(), molecule_batch().to(dev)
        loss = lambda: F.binary_cross_entropy_with_logits(  # noqa: E731
            model(batch.x, batch.edge_index, batch.batch, batch.edge_attr, num_graphs=batch.num_graphs,
                  **pe_inputs(batch)), batch.y)
    else:
        x, ei, y = (t.to(dev) for t in node_graph())
        if which == "nodes":
            model = NodeClassifier(16, 32, 4, num_layers=2, heads=4, dropout=0.2, self_loops=True, propagation=2,
                                   num_global_tokens=1).to(dev).train()
            loss = lambda: F.cross_entropy(model(x, ei), y)  # noqa: E731
        else:
            ea = torch.randn(ei.size(1), 8, device=dev)
            model = GraphSelfAttention(16, 8, heads=4, edge_dim=8, dropout=0.2).to(dev).train()
            loss = lambda: model(x, ei, ea).square().mean()  # noqa: E731
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)

    def step():
        opt.zero_grad(set_to_none=True)
        loss().backward()
        opt.step()

    step()  # first sight of the graph: its CSR view, token edges, ranges are read and remembered
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
