"""The CPU speed layer: the engine's own C kernels and the code that calls them.

The engine's core (config, sequence, scheduler, block_manager, model_runner, attention,
llm_engine) runs without this package: transformers' own modules and torch's SDPA over the
paged KV pool. `EngineConfig(model_impl="transformers", attention_backend="sdpa")`
(`--model-impl transformers --attention-backend sdpa`) runs the engine that way.
"""
