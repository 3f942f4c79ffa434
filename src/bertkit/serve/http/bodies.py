"""The request bodies of every dialect, as pydantic models that refuse unknown fields (a 422 naming the field): what
each official client sends is accepted here, and each field is honoured by its route or refused by it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, StrictBool, StrictInt, StrictStr


def refused(why: str) -> Any:
    """A field a client may send but bertkit cannot honour: absent or null is fine, any value is a 422 naming the
    field and saying ``why``."""

    def check(value: Any) -> None:
        if value is not None:
            raise ValueError(f"bertkit cannot honour it: {why}")

    return Annotated[None, BeforeValidator(check)]


NoPrompts = refused("bertkit models carry no prompts (sentence-transformers' 'prompts'); prepend the text yourself")

Ids = list[StrictInt]
Inputs = StrictStr | Ids | list[StrictStr | Ids]  # TEI and OpenAI: a text, token ids, or a list of either
Direction = Literal["Left", "Right", "left", "right"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Options(_Body):
    """The Hugging Face inference API's ``options`` (langchain-community's HuggingFaceInferenceAPIEmbeddings sends
    both). Both are honoured as they stand: the model is loaded before the server answers anything
    (``wait_for_model``), and bertkit keeps no answer cache, so every answer is computed afresh (``use_cache``)."""

    use_cache: StrictBool | None = None
    wait_for_model: StrictBool | None = None


class EmbedRequest(_Body):  # TEI /embed and POST /; the inference API's feature-extraction (huggingface_hub)
    inputs: Inputs
    normalize: StrictBool = True
    truncate: StrictBool | None = None
    truncation_direction: Direction = "Right"
    prompt_name: NoPrompts = None
    dimensions: StrictInt | None = None
    encoding_format: Literal["float"] | None = None  # TEI's shape is floats; base64 is /v1/embeddings'
    options: Options | None = None


class EmbedAllRequest(_Body):  # TEI /embed_all
    inputs: Inputs
    truncate: StrictBool | None = None
    truncation_direction: Direction = "Right"
    prompt_name: NoPrompts = None


class SimilarityInput(_Body):
    source_sentence: StrictStr
    sentences: list[StrictStr]


class SimilarityParameters(_Body):
    truncate: StrictBool | None = None
    truncation_direction: Direction = "Right"
    prompt_name: NoPrompts = None


class SimilarityRequest(_Body):  # TEI /similarity (huggingface_hub's sentence_similarity)
    inputs: SimilarityInput
    parameters: SimilarityParameters | None = None
    options: Options | None = None


class OpenAIEmbeddingsRequest(_Body):
    input: Inputs
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = None
    user: StrictStr | None = None  # OpenAI's end-user id, for abuse monitoring: bertkit logs no users
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
    prompt_name: NoPrompts = None


class DecodeRequest(_Body):
    ids: Ids | list[Ids]
    skip_special_tokens: StrictBool = True


# ------------------------------------------------------------------ task routes: the inference API's parameters


class ClassificationParameters(_Body):  # InferenceClient.text_classification
    top_k: StrictInt | None = None
    function_to_apply: Literal["sigmoid", "softmax", "none"] | None = None


class PredictRequest(_Body):  # TEI /predict: a text, a [text, pair], or a list of [text] / [text, pair]
    inputs: StrictStr | list[StrictStr] | list[list[StrictStr]]
    truncate: StrictBool | None = None
    truncation_direction: Literal["Right", "right"] = "Right"
    raw_scores: StrictBool = False
    return_all_scores: StrictBool = True  # TEI answers every label, best first
    top_k: StrictInt | None = None
    parameters: ClassificationParameters | None = None
    options: Options | None = None


class RerankRequest(_Body):  # TEI /rerank
    query: StrictStr
    texts: list[StrictStr]
    truncate: StrictBool | None = None
    truncation_direction: Literal["Right", "right"] = "Right"
    raw_scores: StrictBool = False
    return_text: StrictBool = False


class NerParameters(_Body):  # InferenceClient.token_classification
    aggregation_strategy: Literal["none", "simple", "first", "average", "max"] | None = None
    ignore_labels: list[StrictStr] | None = None
    stride: refused("long texts are tagged in consecutive windows without overlap") = None


class NerRequest(_Body):
    inputs: StrictStr | list[StrictStr]
    aggregation_strategy: Literal["none", "simple", "first", "average", "max"] = "simple"
    parameters: NerParameters | None = None
    options: Options | None = None


class QAPair(_Body):
    question: StrictStr
    context: StrictStr


class QAParameters(_Body):  # InferenceClient.question_answering (transformers' conventions)
    top_k: StrictInt | None = None
    handle_impossible_answer: StrictBool | None = None
    doc_stride: StrictInt | None = None
    max_answer_len: StrictInt | None = None
    max_seq_len: StrictInt | None = None
    max_question_len: StrictInt | None = None
    align_to_words: StrictBool | None = None


class QARequest(_Body):  # {"question", "context"}, or the inference API's {"inputs": {"question", "context"}}
    question: StrictStr | None = None
    context: StrictStr | None = None
    inputs: QAPair | list[QAPair] | None = None
    parameters: QAParameters | None = None
    options: Options | None = None


class FillMaskParameters(_Body):  # InferenceClient.fill_mask
    top_k: StrictInt | None = None
    targets: refused("restricting the predictions to given words is not implemented") = None


class FillMaskRequest(_Body):
    inputs: StrictStr | list[StrictStr]
    top_k: StrictInt = 5
    parameters: FillMaskParameters | None = None
    options: Options | None = None
