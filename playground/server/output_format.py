"""The output-format request fields: OpenAI's response_format and vLLM's structured_outputs
(both become the engine's StructuredOutputsParams; openai_protocol.RequestBody maps them)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class JsonSchemaFormat(BaseModel):
    """OpenAI's response_format.json_schema: the schema the output follows."""

    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)
    name: str | None = None
    description: str | None = None
    schema_: dict | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputsBody(BaseModel):
    """vLLM's `structured_outputs` request field: exactly one of json, regex, choice, grammar
    (EBNF), json_object (the engine's StructuredOutputsParams checks it)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    json_: dict | str | None = Field(None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False


def output_format_error(rf: ResponseFormat | None, so: StructuredOutputsBody | None):
    """(param, message) for both formats at once or a json_schema without its schema; None."""
    if rf is not None and rf.type != "text" and so is not None:
        return "response_format", "response_format and structured_outputs cannot be used together"
    if rf is not None and rf.type == "json_schema" and rf.json_schema is None:
        param = "response_format.json_schema"
        return param, f"{param} is required when type is json_schema"
    return None


def structured_outputs_spec(rf: ResponseFormat | None, so: StructuredOutputsBody | None):
    """The engine's structured_outputs (a dict), as vLLM maps them; None for free text."""
    if so is not None:
        return so.model_dump(exclude_none=True, by_alias=True)
    if rf is not None and rf.type == "json_object":
        return {"json_object": True}
    if rf is not None and rf.type == "json_schema":
        return {"json": rf.json_schema.schema_ or {}}
    return None
