from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ColumnKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NULLS: _ClassVar[ColumnKind]
    INTEGERS: _ClassVar[ColumnKind]
    FLOATS: _ClassVar[ColumnKind]
    STRINGS: _ClassVar[ColumnKind]
    VALUES: _ClassVar[ColumnKind]
    STRING_REFS: _ClassVar[ColumnKind]
    CONSTANT: _ClassVar[ColumnKind]

class Relop(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EQ: _ClassVar[Relop]
    NE: _ClassVar[Relop]
    LT: _ClassVar[Relop]
    LE: _ClassVar[Relop]
    GT: _ClassVar[Relop]
    GE: _ClassVar[Relop]

class Op(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RETRIEVE: _ClassVar[Op]
    INSERT: _ClassVar[Op]
    DELETE: _ClassVar[Op]
    UPDATE: _ClassVar[Op]
    RETRIEVE_COMMON: _ClassVar[Op]
NULLS: ColumnKind
INTEGERS: ColumnKind
FLOATS: ColumnKind
STRINGS: ColumnKind
VALUES: ColumnKind
STRING_REFS: ColumnKind
CONSTANT: ColumnKind
EQ: Relop
NE: Relop
LT: Relop
LE: Relop
GT: Relop
GE: Relop
RETRIEVE: Op
INSERT: Op
DELETE: Op
UPDATE: Op
RETRIEVE_COMMON: Op

class Value(_message.Message):
    __slots__ = ("i", "f", "s")
    I_FIELD_NUMBER: _ClassVar[int]
    F_FIELD_NUMBER: _ClassVar[int]
    S_FIELD_NUMBER: _ClassVar[int]
    i: int
    f: float
    s: str
    def __init__(self, i: _Optional[int] = ..., f: _Optional[float] = ..., s: _Optional[str] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ("text", "timeout_s")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    text: str
    timeout_s: float
    def __init__(self, text: _Optional[str] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class LoadRequest(_message.Message):
    __slots__ = ("file", "attributes", "records", "columns")
    FILE_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    file: str
    attributes: _containers.RepeatedScalarFieldContainer[str]
    records: _containers.RepeatedCompositeFieldContainer[Row]
    columns: LoadColumns
    def __init__(self, file: _Optional[str] = ..., attributes: _Optional[_Iterable[str]] = ..., records: _Optional[_Iterable[_Union[Row, _Mapping]]] = ..., columns: _Optional[_Union[LoadColumns, _Mapping]] = ...) -> None: ...

class Column(_message.Message):
    __slots__ = ("kind", "ints", "floats", "strings", "values", "refs")
    KIND_FIELD_NUMBER: _ClassVar[int]
    INTS_FIELD_NUMBER: _ClassVar[int]
    FLOATS_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    kind: ColumnKind
    ints: _containers.RepeatedScalarFieldContainer[int]
    floats: _containers.RepeatedScalarFieldContainer[float]
    strings: _containers.RepeatedScalarFieldContainer[str]
    values: _containers.RepeatedCompositeFieldContainer[Value]
    refs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, kind: _Optional[_Union[ColumnKind, str]] = ..., ints: _Optional[_Iterable[int]] = ..., floats: _Optional[_Iterable[float]] = ..., strings: _Optional[_Iterable[str]] = ..., values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., refs: _Optional[_Iterable[int]] = ...) -> None: ...

class LoadColumns(_message.Message):
    __slots__ = ("count", "columns", "bodies", "cluster_ids", "first")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_IDS_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    count: int
    columns: _containers.RepeatedCompositeFieldContainer[Column]
    bodies: Column
    cluster_ids: _containers.RepeatedScalarFieldContainer[int]
    first: int
    def __init__(self, count: _Optional[int] = ..., columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., bodies: _Optional[_Union[Column, _Mapping]] = ..., cluster_ids: _Optional[_Iterable[int]] = ..., first: _Optional[int] = ...) -> None: ...

class Row(_message.Message):
    __slots__ = ("values", "body")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[Value]
    body: str
    def __init__(self, values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., body: _Optional[str] = ...) -> None: ...

class ReplyHeader(_message.Message):
    __slots__ = ("op", "columns")
    OP_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    op: str
    columns: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, op: _Optional[str] = ..., columns: _Optional[_Iterable[str]] = ...) -> None: ...

class RowBatch(_message.Message):
    __slots__ = ("rows_json", "count", "side")
    ROWS_JSON_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SIDE_FIELD_NUMBER: _ClassVar[int]
    rows_json: bytes
    count: int
    side: int
    def __init__(self, rows_json: _Optional[bytes] = ..., count: _Optional[int] = ..., side: _Optional[int] = ...) -> None: ...

class BackendStats(_message.Message):
    __slots__ = ("backend", "records", "elapsed_ms")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    backend: str
    records: int
    elapsed_ms: float
    def __init__(self, backend: _Optional[str] = ..., records: _Optional[int] = ..., elapsed_ms: _Optional[float] = ...) -> None: ...

class RequestStats(_message.Message):
    __slots__ = ("clusters_examined", "records_retrieved", "backends")
    CLUSTERS_EXAMINED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_RETRIEVED_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    clusters_examined: int
    records_retrieved: int
    backends: _containers.RepeatedCompositeFieldContainer[BackendStats]
    def __init__(self, clusters_examined: _Optional[int] = ..., records_retrieved: _Optional[int] = ..., backends: _Optional[_Iterable[_Union[BackendStats, _Mapping]]] = ...) -> None: ...

class RequestDone(_message.Message):
    __slots__ = ("stats", "elapsed_ms", "first_record")
    STATS_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    FIRST_RECORD_FIELD_NUMBER: _ClassVar[int]
    stats: RequestStats
    elapsed_ms: float
    first_record: int
    def __init__(self, stats: _Optional[_Union[RequestStats, _Mapping]] = ..., elapsed_ms: _Optional[float] = ..., first_record: _Optional[int] = ...) -> None: ...

class ExecuteReply(_message.Message):
    __slots__ = ("request_index", "header", "rows", "done")
    REQUEST_INDEX_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    request_index: int
    header: ReplyHeader
    rows: RowBatch
    done: RequestDone
    def __init__(self, request_index: _Optional[int] = ..., header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., rows: _Optional[_Union[RowBatch, _Mapping]] = ..., done: _Optional[_Union[RequestDone, _Mapping]] = ...) -> None: ...

class ExecuteReplies(_message.Message):
    __slots__ = ("replies", "end", "failure")
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    replies: _containers.RepeatedCompositeFieldContainer[ExecuteReply]
    end: bool
    failure: Failure
    def __init__(self, replies: _Optional[_Iterable[_Union[ExecuteReply, _Mapping]]] = ..., end: _Optional[bool] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class DefineRequest(_message.Message):
    __slots__ = ("yaml",)
    YAML_FIELD_NUMBER: _ClassVar[int]
    yaml: str
    def __init__(self, yaml: _Optional[str] = ...) -> None: ...

class DefineReply(_message.Message):
    __slots__ = ("files_created", "files_unchanged", "files_reindexed")
    FILES_CREATED_FIELD_NUMBER: _ClassVar[int]
    FILES_UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    FILES_REINDEXED_FIELD_NUMBER: _ClassVar[int]
    files_created: _containers.RepeatedScalarFieldContainer[str]
    files_unchanged: _containers.RepeatedScalarFieldContainer[str]
    files_reindexed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, files_created: _Optional[_Iterable[str]] = ..., files_unchanged: _Optional[_Iterable[str]] = ..., files_reindexed: _Optional[_Iterable[str]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("file",)
    FILE_FIELD_NUMBER: _ClassVar[int]
    file: str
    def __init__(self, file: _Optional[str] = ...) -> None: ...

class BackendStatus(_message.Message):
    __slots__ = ("name", "address", "reachable", "error", "records", "metrics_url")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    METRICS_URL_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    reachable: bool
    error: str
    records: int
    metrics_url: str
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., reachable: _Optional[bool] = ..., error: _Optional[str] = ..., records: _Optional[int] = ..., metrics_url: _Optional[str] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("backends", "files", "directory_digest", "metrics_url", "internal_timing", "file_defs", "descriptors", "descriptor_counts", "shortened", "file_defs_left_out", "cluster")
    class DescriptorCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ShortenedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: ShortenedValues
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[ShortenedValues, _Mapping]] = ...) -> None: ...
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    METRICS_URL_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_TIMING_FIELD_NUMBER: _ClassVar[int]
    FILE_DEFS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTORS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTOR_COUNTS_FIELD_NUMBER: _ClassVar[int]
    SHORTENED_FIELD_NUMBER: _ClassVar[int]
    FILE_DEFS_LEFT_OUT_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    backends: _containers.RepeatedCompositeFieldContainer[BackendStatus]
    files: _containers.RepeatedScalarFieldContainer[str]
    directory_digest: str
    metrics_url: str
    internal_timing: bool
    file_defs: _containers.RepeatedCompositeFieldContainer[FileDef]
    descriptors: _containers.RepeatedCompositeFieldContainer[Descriptor]
    descriptor_counts: _containers.ScalarMap[str, int]
    shortened: _containers.MessageMap[int, ShortenedValues]
    file_defs_left_out: int
    cluster: str
    def __init__(self, backends: _Optional[_Iterable[_Union[BackendStatus, _Mapping]]] = ..., files: _Optional[_Iterable[str]] = ..., directory_digest: _Optional[str] = ..., metrics_url: _Optional[str] = ..., internal_timing: _Optional[bool] = ..., file_defs: _Optional[_Iterable[_Union[FileDef, _Mapping]]] = ..., descriptors: _Optional[_Iterable[_Union[Descriptor, _Mapping]]] = ..., descriptor_counts: _Optional[_Mapping[str, int]] = ..., shortened: _Optional[_Mapping[int, ShortenedValues]] = ..., file_defs_left_out: _Optional[int] = ..., cluster: _Optional[str] = ...) -> None: ...

class ShortenedValues(_message.Message):
    __slots__ = ("low", "high", "value")
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    low: int
    high: int
    value: int
    def __init__(self, low: _Optional[int] = ..., high: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...

class Predicate(_message.Message):
    __slots__ = ("attr", "op", "value")
    ATTR_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    attr: str
    op: Relop
    value: Value
    def __init__(self, attr: _Optional[str] = ..., op: _Optional[_Union[Relop, str]] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...

class Conjunction(_message.Message):
    __slots__ = ("predicates", "files")
    PREDICATES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    predicates: _containers.RepeatedCompositeFieldContainer[Predicate]
    files: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, predicates: _Optional[_Iterable[_Union[Predicate, _Mapping]]] = ..., files: _Optional[_Iterable[str]] = ...) -> None: ...

class Query(_message.Message):
    __slots__ = ("conjunctions",)
    CONJUNCTIONS_FIELD_NUMBER: _ClassVar[int]
    conjunctions: _containers.RepeatedCompositeFieldContainer[Conjunction]
    def __init__(self, conjunctions: _Optional[_Iterable[_Union[Conjunction, _Mapping]]] = ...) -> None: ...

class TargetItem(_message.Message):
    __slots__ = ("attr", "agg")
    ATTR_FIELD_NUMBER: _ClassVar[int]
    AGG_FIELD_NUMBER: _ClassVar[int]
    attr: str
    agg: str
    def __init__(self, attr: _Optional[str] = ..., agg: _Optional[str] = ...) -> None: ...

class Modifier(_message.Message):
    __slots__ = ("attr", "source", "arith", "value")
    ATTR_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ARITH_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    attr: str
    source: str
    arith: str
    value: Value
    def __init__(self, attr: _Optional[str] = ..., source: _Optional[str] = ..., arith: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...

class PlacedRecord(_message.Message):
    __slots__ = ("cluster_id", "values", "body")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    values: _containers.RepeatedCompositeFieldContainer[Value]
    body: str
    def __init__(self, cluster_id: _Optional[int] = ..., values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., body: _Optional[str] = ...) -> None: ...

class Retrieval(_message.Message):
    __slots__ = ("query", "targets", "by")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    query: Query
    targets: _containers.RepeatedCompositeFieldContainer[TargetItem]
    by: str
    def __init__(self, query: _Optional[_Union[Query, _Mapping]] = ..., targets: _Optional[_Iterable[_Union[TargetItem, _Mapping]]] = ..., by: _Optional[str] = ...) -> None: ...

class Request(_message.Message):
    __slots__ = ("op", "file", "retrieval", "right", "modifier", "records", "record_count", "moves_records", "predicate_base", "load_columns", "columns")
    OP_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    RETRIEVAL_FIELD_NUMBER: _ClassVar[int]
    RIGHT_FIELD_NUMBER: _ClassVar[int]
    MODIFIER_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    MOVES_RECORDS_FIELD_NUMBER: _ClassVar[int]
    PREDICATE_BASE_FIELD_NUMBER: _ClassVar[int]
    LOAD_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    op: Op
    file: str
    retrieval: Retrieval
    right: Retrieval
    modifier: Modifier
    records: _containers.RepeatedCompositeFieldContainer[PlacedRecord]
    record_count: int
    moves_records: bool
    predicate_base: int
    load_columns: bytes
    columns: LoadColumns
    def __init__(self, op: _Optional[_Union[Op, str]] = ..., file: _Optional[str] = ..., retrieval: _Optional[_Union[Retrieval, _Mapping]] = ..., right: _Optional[_Union[Retrieval, _Mapping]] = ..., modifier: _Optional[_Union[Modifier, _Mapping]] = ..., records: _Optional[_Iterable[_Union[PlacedRecord, _Mapping]]] = ..., record_count: _Optional[int] = ..., moves_records: _Optional[bool] = ..., predicate_base: _Optional[int] = ..., load_columns: _Optional[bytes] = ..., columns: _Optional[_Union[LoadColumns, _Mapping]] = ...) -> None: ...

class AttributeDef(_message.Message):
    __slots__ = ("name", "type", "directory", "indexed")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    INDEXED_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    directory: str
    indexed: bool
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., directory: _Optional[str] = ..., indexed: _Optional[bool] = ...) -> None: ...

class FileDef(_message.Message):
    __slots__ = ("name", "attributes", "revision")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    name: str
    attributes: _containers.RepeatedCompositeFieldContainer[AttributeDef]
    revision: int
    def __init__(self, name: _Optional[str] = ..., attributes: _Optional[_Iterable[_Union[AttributeDef, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class Descriptor(_message.Message):
    __slots__ = ("id", "file", "attr", "kind", "low", "high", "value")
    ID_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    ATTR_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    id: int
    file: str
    attr: str
    kind: str
    low: Value
    high: Value
    value: Value
    def __init__(self, id: _Optional[int] = ..., file: _Optional[str] = ..., attr: _Optional[str] = ..., kind: _Optional[str] = ..., low: _Optional[_Union[Value, _Mapping]] = ..., high: _Optional[_Union[Value, _Mapping]] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...

class Cluster(_message.Message):
    __slots__ = ("id", "file", "descriptor_ids")
    ID_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTOR_IDS_FIELD_NUMBER: _ClassVar[int]
    id: int
    file: str
    descriptor_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, id: _Optional[int] = ..., file: _Optional[str] = ..., descriptor_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class DirectoryUpdate(_message.Message):
    __slots__ = ("files", "descriptors", "clusters")
    FILES_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTORS_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[FileDef]
    descriptors: _containers.RepeatedCompositeFieldContainer[Descriptor]
    clusters: _containers.RepeatedCompositeFieldContainer[Cluster]
    def __init__(self, files: _Optional[_Iterable[_Union[FileDef, _Mapping]]] = ..., descriptors: _Optional[_Iterable[_Union[Descriptor, _Mapping]]] = ..., clusters: _Optional[_Iterable[_Union[Cluster, _Mapping]]] = ...) -> None: ...

class BusHello(_message.Message):
    __slots__ = ("epoch", "backend_index", "peers", "internal_timing", "iig_address", "credit_window", "members")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    BACKEND_INDEX_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_TIMING_FIELD_NUMBER: _ClassVar[int]
    IIG_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CREDIT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    epoch: str
    backend_index: int
    peers: _containers.RepeatedScalarFieldContainer[str]
    internal_timing: bool
    iig_address: str
    credit_window: int
    members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, epoch: _Optional[str] = ..., backend_index: _Optional[int] = ..., peers: _Optional[_Iterable[str]] = ..., internal_timing: _Optional[bool] = ..., iig_address: _Optional[str] = ..., credit_window: _Optional[int] = ..., members: _Optional[_Iterable[str]] = ...) -> None: ...

class TrafficUnit(_message.Message):
    __slots__ = ("seq", "requests", "directory", "transaction", "predicate_count", "split_search", "one_phase")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    PREDICATE_COUNT_FIELD_NUMBER: _ClassVar[int]
    SPLIT_SEARCH_FIELD_NUMBER: _ClassVar[int]
    ONE_PHASE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    requests: _containers.RepeatedCompositeFieldContainer[Request]
    directory: DirectoryUpdate
    transaction: bool
    predicate_count: int
    split_search: bool
    one_phase: bool
    def __init__(self, seq: _Optional[int] = ..., requests: _Optional[_Iterable[_Union[Request, _Mapping]]] = ..., directory: _Optional[_Union[DirectoryUpdate, _Mapping]] = ..., transaction: _Optional[bool] = ..., predicate_count: _Optional[int] = ..., split_search: _Optional[bool] = ..., one_phase: _Optional[bool] = ...) -> None: ...

class Abort(_message.Message):
    __slots__ = ("seq", "reason")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    seq: int
    reason: str
    def __init__(self, seq: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class Commit(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class Credit(_message.Message):
    __slots__ = ("seq", "batches")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    seq: int
    batches: int
    def __init__(self, seq: _Optional[int] = ..., batches: _Optional[int] = ...) -> None: ...

class BusMessage(_message.Message):
    __slots__ = ("hello", "traffic_unit", "abort", "commit", "credit")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_UNIT_FIELD_NUMBER: _ClassVar[int]
    ABORT_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    hello: BusHello
    traffic_unit: TrafficUnit
    abort: Abort
    commit: Commit
    credit: Credit
    def __init__(self, hello: _Optional[_Union[BusHello, _Mapping]] = ..., traffic_unit: _Optional[_Union[TrafficUnit, _Mapping]] = ..., abort: _Optional[_Union[Abort, _Mapping]] = ..., commit: _Optional[_Union[Commit, _Mapping]] = ..., credit: _Optional[_Union[Credit, _Mapping]] = ...) -> None: ...

class BusBatch(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[BusMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[BusMessage, _Mapping]]] = ...) -> None: ...

class BackendReplies(_message.Message):
    __slots__ = ("replies",)
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    replies: _containers.RepeatedCompositeFieldContainer[BackendReply]
    def __init__(self, replies: _Optional[_Iterable[_Union[BackendReply, _Mapping]]] = ...) -> None: ...

class PartialGroup(_message.Message):
    __slots__ = ("key", "sums", "counts", "mins", "maxs", "records", "sum_lows")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SUMS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    MINS_FIELD_NUMBER: _ClassVar[int]
    MAXS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    SUM_LOWS_FIELD_NUMBER: _ClassVar[int]
    key: Value
    sums: _containers.RepeatedCompositeFieldContainer[Value]
    counts: _containers.RepeatedScalarFieldContainer[int]
    mins: _containers.RepeatedCompositeFieldContainer[Value]
    maxs: _containers.RepeatedCompositeFieldContainer[Value]
    records: int
    sum_lows: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, key: _Optional[_Union[Value, _Mapping]] = ..., sums: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., counts: _Optional[_Iterable[int]] = ..., mins: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., maxs: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., records: _Optional[int] = ..., sum_lows: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class PartialGroups(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[PartialGroup]
    def __init__(self, groups: _Optional[_Iterable[_Union[PartialGroup, _Mapping]]] = ...) -> None: ...

class BackendReply(_message.Message):
    __slots__ = ("seq", "request_index", "rows", "groups", "done", "error", "committed", "prepared", "forgotten")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    REQUEST_INDEX_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    PREPARED_FIELD_NUMBER: _ClassVar[int]
    FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    seq: int
    request_index: int
    rows: RowBatch
    groups: PartialGroups
    done: RequestDone
    error: str
    committed: bool
    prepared: bool
    forgotten: bool
    def __init__(self, seq: _Optional[int] = ..., request_index: _Optional[int] = ..., rows: _Optional[_Union[RowBatch, _Mapping]] = ..., groups: _Optional[_Union[PartialGroups, _Mapping]] = ..., done: _Optional[_Union[RequestDone, _Mapping]] = ..., error: _Optional[str] = ..., committed: _Optional[bool] = ..., prepared: _Optional[bool] = ..., forgotten: _Optional[bool] = ...) -> None: ...

class HelloRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HelloReply(_message.Message):
    __slots__ = ("name", "directory_digest", "metrics_port", "in_doubt", "cluster", "bus_epoch", "members", "committed", "carried")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    METRICS_PORT_FIELD_NUMBER: _ClassVar[int]
    IN_DOUBT_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BUS_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    CARRIED_FIELD_NUMBER: _ClassVar[int]
    name: str
    directory_digest: str
    metrics_port: int
    in_doubt: _containers.RepeatedCompositeFieldContainer[UnitId]
    cluster: str
    bus_epoch: str
    members: _containers.RepeatedScalarFieldContainer[str]
    committed: _containers.RepeatedCompositeFieldContainer[UnitId]
    carried: _containers.RepeatedCompositeFieldContainer[UnitId]
    def __init__(self, name: _Optional[str] = ..., directory_digest: _Optional[str] = ..., metrics_port: _Optional[int] = ..., in_doubt: _Optional[_Iterable[_Union[UnitId, _Mapping]]] = ..., cluster: _Optional[str] = ..., bus_epoch: _Optional[str] = ..., members: _Optional[_Iterable[str]] = ..., committed: _Optional[_Iterable[_Union[UnitId, _Mapping]]] = ..., carried: _Optional[_Iterable[_Union[UnitId, _Mapping]]] = ...) -> None: ...

class UnitId(_message.Message):
    __slots__ = ("epoch", "seq")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    epoch: str
    seq: int
    def __init__(self, epoch: _Optional[str] = ..., seq: _Optional[int] = ...) -> None: ...

class Outcome(_message.Message):
    __slots__ = ("unit", "commit")
    UNIT_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    unit: UnitId
    commit: bool
    def __init__(self, unit: _Optional[_Union[UnitId, _Mapping]] = ..., commit: _Optional[bool] = ...) -> None: ...

class Outcomes(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[Outcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[Outcome, _Mapping]]] = ...) -> None: ...

class DirectoryRequest(_message.Message):
    __slots__ = ("start",)
    START_FIELD_NUMBER: _ClassVar[int]
    start: DirectoryPosition
    def __init__(self, start: _Optional[_Union[DirectoryPosition, _Mapping]] = ...) -> None: ...

class DirectoryPosition(_message.Message):
    __slots__ = ("section", "after_file", "after_id")
    SECTION_FIELD_NUMBER: _ClassVar[int]
    AFTER_FILE_FIELD_NUMBER: _ClassVar[int]
    AFTER_ID_FIELD_NUMBER: _ClassVar[int]
    section: int
    after_file: str
    after_id: int
    def __init__(self, section: _Optional[int] = ..., after_file: _Optional[str] = ..., after_id: _Optional[int] = ...) -> None: ...

class ClusterCount(_message.Message):
    __slots__ = ("cluster_id", "records")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    records: int
    def __init__(self, cluster_id: _Optional[int] = ..., records: _Optional[int] = ...) -> None: ...

class DirectoryReply(_message.Message):
    __slots__ = ("name", "directory", "counts", "directory_digest", "next")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    name: str
    directory: DirectoryUpdate
    counts: _containers.RepeatedCompositeFieldContainer[ClusterCount]
    directory_digest: str
    next: DirectoryPosition
    def __init__(self, name: _Optional[str] = ..., directory: _Optional[_Union[DirectoryUpdate, _Mapping]] = ..., counts: _Optional[_Iterable[_Union[ClusterCount, _Mapping]]] = ..., directory_digest: _Optional[str] = ..., next: _Optional[_Union[DirectoryPosition, _Mapping]] = ...) -> None: ...

class PlaceRequest(_message.Message):
    __slots__ = ("file", "directory_values", "backend")
    FILE_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_VALUES_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    file: str
    directory_values: _containers.RepeatedCompositeFieldContainer[Value]
    backend: str
    def __init__(self, file: _Optional[str] = ..., directory_values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., backend: _Optional[str] = ...) -> None: ...

class PlaceReply(_message.Message):
    __slots__ = ("cluster_id", "directory")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    directory: DirectoryUpdate
    def __init__(self, cluster_id: _Optional[int] = ..., directory: _Optional[_Union[DirectoryUpdate, _Mapping]] = ...) -> None: ...

class PredicateDescriptors(_message.Message):
    __slots__ = ("predicate_index", "descriptor_ids", "unrestricted")
    PREDICATE_INDEX_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTOR_IDS_FIELD_NUMBER: _ClassVar[int]
    UNRESTRICTED_FIELD_NUMBER: _ClassVar[int]
    predicate_index: int
    descriptor_ids: _containers.RepeatedScalarFieldContainer[int]
    unrestricted: bool
    def __init__(self, predicate_index: _Optional[int] = ..., descriptor_ids: _Optional[_Iterable[int]] = ..., unrestricted: _Optional[bool] = ...) -> None: ...

class DescriptorIds(_message.Message):
    __slots__ = ("epoch", "seq", "from_index", "results")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    FROM_INDEX_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    epoch: str
    seq: int
    from_index: int
    results: _containers.RepeatedCompositeFieldContainer[PredicateDescriptors]
    def __init__(self, epoch: _Optional[str] = ..., seq: _Optional[int] = ..., from_index: _Optional[int] = ..., results: _Optional[_Iterable[_Union[PredicateDescriptors, _Mapping]]] = ...) -> None: ...

class DescriptorIdsBatch(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedCompositeFieldContainer[DescriptorIds]
    def __init__(self, ids: _Optional[_Iterable[_Union[DescriptorIds, _Mapping]]] = ...) -> None: ...

class PeerAck(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
