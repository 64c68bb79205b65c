"""Statistical models as plug-ins (see README.md): used by the party daemon and by simulations alike."""

from mechanisms.models.base import (
    BUILTIN,
    Column,
    Data,
    Model,
    SchemaError,
    as_batch,
    load_model,
    resolve_model_class,
    validate_columns,
)

__all__ = [
    "BUILTIN",
    "Column",
    "Data",
    "Model",
    "SchemaError",
    "as_batch",
    "load_model",
    "resolve_model_class",
    "validate_columns",
]
