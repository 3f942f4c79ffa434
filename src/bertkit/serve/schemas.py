"""The request bodies of every dialect, as pydantic models that refuse unknown fields (a 422 naming the field): what
each official client sends is accepted here, and each field is honoured by its route or refused by it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr

Ids = list[StrictInt]
Inputs = StrictStr | Ids | list[StrictStr | Ids]  # TEI and OpenAI: a text, token ids, or a list of either


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EmbedRequest(_Body):  # TEI /embed and POST /
    inputs: Inputs
    normalize: StrictBool = True
    truncate: StrictBool | None = None
    truncation_direction: Literal["Left", "Right", "left", "right"] = "Right"
    prompt_name: None = None
    dimensions: StrictInt | None = None


class EmbedAllRequest(_Body):  # TEI /embed_all
    inputs: Inputs
    truncate: StrictBool | None = None
    truncation_direction: Literal["Left", "Right", "left", "right"] = "Right"
    prompt_name: None = None


class SimilarityInput(_Body):
    source_sentence: StrictStr
    sentences: list[StrictStr]


class SimilarityParameters(_Body):
    truncate: StrictBool | None = None
    truncation_direction: Literal["Left", "Right", "left", "right"] = "Right"
    prompt_name: None = None


class SimilarityRequest(_Body):  # TEI /similarity (huggingface_hub's sentence_similarity)
    inputs: SimilarityInput
    parameters: SimilarityParameters | None = None


class OpenAIEmbeddingsRequest(_Body):
    input: Inputs
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = None
    user: StrictStr | None = None
    truncate: StrictBool | None = None  # bertkit's extension: cut over-long inputs instead of 422


class EncodeRequest(_Body):  # bert-as-service, plus bertkit's fields
    texts: list[StrictStr | list[StrictStr]]
    id: StrictInt | StrictStr | None = None
    is_tokenized: StrictBool = False
    pairs: list[StrictStr] | None = None
    pooling_layer: StrictInt | StrictStr | list[StrictInt | StrictStr] | None = None
    pooling_strategy: StrictStr | None = None
    normalize: StrictBool = False
    show_tokens: StrictBool = False
    truncate: StrictBool = True  # bert-as-service cut inputs to max_seq_len silently
    encoding_format: Literal["float", "base64"] = "float"


class TokenizeRequest(_Body):
    inputs: StrictStr | list[StrictStr]
    pairs: StrictStr | list[StrictStr] | None = None
    add_special_tokens: StrictBool = True
    prompt_name: None = None


class DecodeRequest(_Body):
    ids: Ids | list[Ids]
    skip_special_tokens: StrictBool = True


class HFParameters(_Body):  # the Hugging Face inference API's "parameters" (InferenceClient.text_classification)
    top_k: StrictInt | None = None
    function_to_apply: Literal["sigmoid", "softmax", "none"] | None = None


class PredictRequest(_Body):  # TEI /predict: a text, a [text, pair], or a list of [text] / [text, pair]
    inputs: StrictStr | list[StrictStr] | list[list[StrictStr]]
    truncate: StrictBool | None = None
    truncation_direction: Literal["Right", "right"] = "Right"
    raw_scores: StrictBool = False
    return_all_scores: StrictBool = True  # TEI answers every label, best first
    top_k: StrictInt | None = None
    parameters: HFParameters | None = None


class RerankRequest(_Body):  # TEI /rerank
    query: StrictStr
    texts: list[StrictStr]
    truncate: StrictBool | None = None
    truncation_direction: Literal["Right", "right"] = "Right"
    raw_scores: StrictBool = False
    return_text: StrictBool = False


class NerRequest(_Body):
    inputs: StrictStr | list[StrictStr]
    aggregation_strategy: Literal["simple", "none"] = "simple"
    parameters: dict[str, Any] | None = None


class QAPair(_Body):
    question: StrictStr
    context: StrictStr


class QARequest(_Body):  # {"question", "context"}, or the inference API's {"inputs": {"question", "context"}}
    question: StrictStr | None = None
    context: StrictStr | None = None
    inputs: QAPair | list[QAPair] | None = None
    parameters: dict[str, Any] | None = None


class FillMaskRequest(_Body):
    inputs: StrictStr | list[StrictStr]
    top_k: StrictInt = 5
