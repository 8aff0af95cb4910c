"""Type stubs of the C++ extension attn._core (nanobind)."""
from typing import Any, Optional, Sequence, Union

import numpy as np

DTypeLike = Any  # "bfloat16" / "bf16" / np.float16 / ml_dtypes.bfloat16 / torch.bfloat16
PlatformLike = Union[None, str, "Platform"]  # None = this CPU; "cpu:avx2", "cuda:9.0", ...
ArrayLike = Any  # a NumPy array or DLPack tensor (PyTorch CPU) of float32 / float16 / bfloat16
IntsLike = Any  # a sequence of ints, or a NumPy / torch integer array

class Error(ValueError):
    """Bad input or an unsupported request; the message names argument, value and expectation."""

class LayerConfig:
    """Everything the selector may look at for one layer (the selector key)."""

    num_heads: int
    num_kv_heads: int
    head_size: int
    head_size_v: int
    block_size: int
    sliding_window: int
    logits_soft_cap: float
    use_alibi: bool
    has_sink: bool
    use_mla: bool
    use_sparse: bool
    use_mm_prefix: bool
    use_per_head_quant_scales: bool
    is_attention_free: bool
    use_block_sparse: bool
    bs_block_size: int
    bs_local_blocks: int
    bs_vert_stride: int
    bs_head_sliding_step: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    index_topk: int
    use_non_causal: bool
    use_batch_invariant: bool
    use_kv_connector: bool
    @property
    def dtype(self) -> str: ...
    @dtype.setter
    def dtype(self, value: DTypeLike) -> None: ...
    @property
    def kv_cache_dtype(self) -> str: ...
    @kv_cache_dtype.setter
    def kv_cache_dtype(self, value: Optional[DTypeLike]) -> None: ...
    @property
    def attn_type(self) -> str: ...
    @attn_type.setter
    def attn_type(self, value: str) -> None: ...
    def __init__(
        self,
        *,
        num_heads: int = 32,
        num_kv_heads: int = 8,
        head_size: int = 128,
        head_size_v: int = 0,
        dtype: DTypeLike = "bfloat16",
        kv_cache_dtype: Optional[DTypeLike] = "auto",
        block_size: int = 0,
        attn_type: Optional[str] = "decoder",
        sliding_window: Optional[int] = 0,
        logits_soft_cap: Optional[float] = 0.0,
        use_alibi: bool = False,
        has_sink: bool = False,
        use_mla: bool = False,
        use_sparse: bool = False,
        use_mm_prefix: bool = False,
        use_per_head_quant_scales: bool = False,
        is_attention_free: bool = False,
        use_block_sparse: bool = False,
        bs_block_size: int = 0,
        bs_local_blocks: int = 0,
        bs_vert_stride: int = 0,
        bs_head_sliding_step: int = 0,
        kv_lora_rank: int = 0,
        qk_rope_head_dim: int = 0,
        qk_nope_head_dim: int = 0,
        v_head_dim: int = 0,
        index_topk: int = 0,
        use_non_causal: bool = False,
        use_batch_invariant: bool = False,
        use_kv_connector: bool = False,
    ) -> None: ...
    @property
    def kind(self) -> str: ...
    @property
    def causal(self) -> bool: ...
    @property
    def effective_head_size_v(self) -> int: ...
    def validate(self) -> None: ...
    def replace(self, **changes: Any) -> LayerConfig: ...
    def to_dict(self) -> dict[str, Any]: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class Platform:
    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def cpu_vendor(self) -> str: ...
    @property
    def cores(self) -> int: ...
    @property
    def features(self) -> list[str]: ...
    @property
    def compute_capability(self) -> Optional[str]: ...
    @property
    def detected(self) -> bool: ...
    @property
    def fingerprint(self) -> str: ...
    def has(self, feature: str) -> bool: ...

def platform(spec: PlatformLike = None) -> Platform: ...

class BackendInfo:
    name: str
    summary: str
    priority: int
    preferred_block_size: int
    kv_layout: str
    kv_layout_rule: dict[str, Any] | None
    module: str
    variant: str
    platforms: list[str]
    dtypes: list[str]
    kv_cache_dtypes: list[str]
    head_sizes: str
    block_sizes: str
    attn_types: list[str]
    required_cpu_features: list[str]
    compute_capability: str
    features: list[str]
    def to_dict(self) -> dict[str, Any]: ...

def backends() -> list[BackendInfo]: ...
def load_plugin(path: str) -> None: ...

class Reason:
    field: str
    value: str
    expected: str

class Candidate:
    backend: str
    valid: bool
    priority: int
    reasons: list[Reason]
    def to_dict(self) -> dict[str, Any]: ...

class Decision:
    backend: str
    variant: str
    config: Optional[LayerConfig]  # None for a mixer layer's decision (select_mamba)
    platform: str
    forced_by: str
    block_size: int
    block_size_from_user: bool
    tuned: bool
    candidates: list[Candidate]
    notes: list[str]
    slow_path: str
    def to_text(self) -> str: ...
    def to_json(self) -> str: ...
    def to_dict(self) -> dict[str, Any]: ...

def select(config: LayerConfig, backend: Optional[str] = None, platform: PlatformLike = None, *,
           per_kind: Optional[dict[str, str]] = None) -> Decision: ...
def explain(config: LayerConfig, backend: Optional[str] = None, platform: PlatformLike = None, *,
            per_kind: Optional[dict[str, str]] = None) -> Decision: ...
def clear_selector_cache() -> None: ...
def select_mamba(mixer_type: str, backend: Optional[str] = None, platform: PlatformLike = None) -> Decision: ...
def mixer_backends() -> list[dict[str, Any]]: ...

class ModelLayer:
    index: int
    attention: LayerConfig
    mixer_dims: dict[str, float]
    softmax_scale: float
    @property
    def kind(self) -> str: ...
    @property
    def mixer(self) -> Optional[str]: ...

class ModelSpec:
    name: str
    architecture: str
    hidden_size: int
    num_layers: int
    layers: list[ModelLayer]

def load_model(model: str, *, dtype: Optional[DTypeLike] = None, kv_cache_dtype: Optional[DTypeLike] = None,
               block_size: int = 0) -> ModelSpec: ...
def builtin_models() -> list[str]: ...

class PlanGroup:
    layers: list[int]
    layer_ranges: str
    whole: ModelLayer
    sample: ModelLayer
    sharding: HeadSharding
    decision: Decision
    error: str
    @property
    def kind(self) -> str: ...

class ModelPlan:
    model: ModelSpec
    rank_model: ModelSpec
    platform: str
    tensor_parallel: int
    pipeline_parallel: int
    groups: list[PlanGroup]
    def all_served(self) -> bool: ...
    def to_json(self) -> str: ...
    def to_dict(self) -> dict[str, Any]: ...

def plan_model(model: ModelSpec, platform: PlatformLike = None, *, backend: Optional[str] = None,
               tensor_parallel: int = 1, pipeline_parallel: int = 1) -> ModelPlan: ...
def tune(model: Optional[str] = None, *, configs: Optional[list[LayerConfig]] = None, budget: float = 20.0,
         threads: int = 0, decode_batch: int = 4, decode_context: int = 1024, prefill_len: int = 256,
         backend: Optional[str] = None, output: Optional[str] = None, progress: bool = True) -> dict[str, Any]: ...
def tuning_file_path() -> str: ...
def reload_tuning() -> None: ...

class HeadSharding:
    tensor_parallel: int
    num_heads: int
    num_kv_heads: int
    kv_head_replicas: int
    def first_head(self, rank: int) -> int: ...
    def first_kv_head(self, rank: int) -> int: ...

def shard_heads(config: LayerConfig, tensor_parallel: int) -> HeadSharding: ...
def shard_layer_config(config: LayerConfig, tensor_parallel: int) -> LayerConfig: ...
def shard_model(model: ModelSpec, tensor_parallel: int) -> ModelSpec: ...
def pipeline_stages(num_layers: int, pipeline_parallel: int) -> list[tuple[int, int]]: ...

class KVCache:
    def __init__(self, num_blocks: int, *, block_size: int = 16, num_kv_heads: int = 8, head_size: int = 128,
                 head_size_v: int = 0, dtype: Optional[DTypeLike] = None, kv_cache_dtype: Optional[DTypeLike] = None,
                 layout: str = "NHD", per_head_scales: bool = False) -> None: ...
    @property
    def num_blocks(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def num_kv_heads(self) -> int: ...
    @property
    def head_size(self) -> int: ...
    @property
    def head_size_v(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def kv_cache_dtype(self) -> str: ...
    @property
    def layout(self) -> str: ...
    @property
    def per_head_scales(self) -> bool: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def k_scales(self) -> list[float]: ...
    @property
    def v_scales(self) -> list[float]: ...
    def set_scales(self, k_scales: Union[float, Sequence[float]], v_scales: Union[float, Sequence[float]]) -> None: ...
    def fill(self, value: float) -> None: ...
    def copy_block(self, src: int, dst: int) -> None: ...
    def numpy(self) -> np.ndarray: ...
    @staticmethod
    def from_dlpack(tensor: Any, *, layout: str = "NHD", head_size_v: int = 0, per_head_scales: bool = False,
                    k_scales: Any = None, v_scales: Any = None, kv_cache_dtype: str = "") -> KVCache: ...
    @staticmethod
    def from_views(k: Any, v: Any, *, per_head_scales: bool = False, k_scales: Any = None, v_scales: Any = None) -> KVCache: ...
    def token_scales(self) -> Optional[tuple[np.ndarray, np.ndarray]]: ...
    @property
    def strided(self) -> bool: ...
    @property
    def owns_storage(self) -> bool: ...

class BatchMetadata:
    def __init__(self, *, query_lens: IntsLike, block_ids: Union[Sequence[Sequence[int]], Any],
                 context_lens: Optional[IntsLike] = None, seq_lens: Optional[IntsLike] = None,
                 cache: Optional[KVCache] = None, block_size: int = 0, num_blocks: int = 0,
                 causal: bool = True, slot_mapping: Optional[IntsLike] = None) -> None: ...
    num_seqs: int
    num_tokens: int
    block_size: int
    max_blocks_per_seq: int
    max_query_len: int
    max_seq_len: int
    causal: bool
    @property
    def query_start_loc(self) -> np.ndarray: ...
    @property
    def seq_lens(self) -> np.ndarray: ...
    @property
    def block_table(self) -> np.ndarray: ...
    @property
    def slot_mapping(self) -> np.ndarray: ...

class Workspace:
    """Scratch memory for Attention.run, reused across layers and steps; one run at a time."""

    def __init__(self, bytes: int = 0) -> None: ...
    @property
    def nbytes(self) -> int: ...
    def reserve(self, bytes: int) -> None: ...

class StepPlan:
    """One step planned for a layer config; shared by every layer with that backend and config."""

    @property
    def backend(self) -> str: ...
    @property
    def config(self) -> LayerConfig: ...
    @property
    def metadata(self) -> BatchMetadata: ...
    @property
    def workspace_bytes(self) -> int: ...
    @property
    def preferred_mla_form(self) -> str: ...

class Attention:
    def __init__(self, config: LayerConfig, backend: Optional[str] = None, *, scale: Optional[float] = None,
                 sinks: Optional[Sequence[float]] = None, alibi_slopes: Optional[Sequence[float]] = None,
                 num_threads: int = 0, w_uk: Optional[ArrayLike] = None, w_uv: Optional[ArrayLike] = None) -> None: ...
    @property
    def config(self) -> LayerConfig: ...
    @property
    def decision(self) -> Decision: ...
    @property
    def backend(self) -> str: ...
    @property
    def variant(self) -> str: ...
    @property
    def scale(self) -> float: ...
    @property
    def block_size(self) -> int: ...
    def make_cache(self, num_blocks: int, block_size: int = 0) -> KVCache: ...
    def kv_cache_shape(self, num_blocks: int, block_size: int = 0) -> tuple[int, ...]: ...
    @property
    def kv_cache_dtype(self) -> str: ...
    @property
    def kv_cache_layout(self) -> str: ...
    def write_kv(self, k: ArrayLike, v: Optional[ArrayLike], cache: KVCache, metadata: BatchMetadata) -> None: ...
    def plan(self, metadata: BatchMetadata, cache: KVCache) -> StepPlan: ...
    def run(self, plan: StepPlan, q: ArrayLike, cache: KVCache, out: Optional[ArrayLike] = None, *,
            k: Optional[ArrayLike] = None, v: Optional[ArrayLike] = None, topk_indices: Optional[ArrayLike] = None,
            mla_form: str = "absorbed", workspace: Optional[Workspace] = None) -> Any: ...
    def forward(self, q: ArrayLike, cache: KVCache, metadata: BatchMetadata, out: Optional[ArrayLike] = None, *,
                k: Optional[ArrayLike] = None, v: Optional[ArrayLike] = None, topk_indices: Optional[ArrayLike] = None,
                mla_form: str = "absorbed") -> Any: ...

def _data_address(array: ArrayLike, writable: bool = False) -> int: ...
