/* hearth.h: the stable C API of the Hearth engine (libhearth): opaque handles, status codes and
 * size-tagged parameter structs. Add a call at the end of its section; ABI rules: docs/c-api.md. */
#ifndef HEARTH_HEARTH_H_
#define HEARTH_HEARTH_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#if defined(HEARTH_BUILDING_LIBRARY)
#define HEARTH_API __declspec(dllexport)
#else
#define HEARTH_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define HEARTH_API __attribute__((visibility("default")))
#else
#define HEARTH_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Versions --------------------------------------------------------------------------- */

#define HEARTH_VERSION_MAJOR 0
#define HEARTH_VERSION_MINOR 1
#define HEARTH_VERSION_PATCH 0
/* Bumped on every incompatible change of this header; the SONAME follows it (docs/c-api.md). */
#define HEARTH_ABI_VERSION 1

/* "0.1.0": the library's version (may be newer than the header an app was built with). */
HEARTH_API const char* hearth_version(void);
/* HEARTH_ABI_VERSION of the library actually loaded; apps may compare it at start-up. */
HEARTH_API uint32_t hearth_abi_version(void);

/* ---- Status and errors ------------------------------------------------------------------ */

/* Every fallible call returns a hearth_status. On failure hearth_last_error() holds a one-line
 * message; on success it is "". */
typedef int32_t hearth_status;
enum {
  HEARTH_OK = 0,
  HEARTH_ERR_INVALID_ARGUMENT = 1, /* a null handle/pointer, a bad size field, a bad value */
  HEARTH_ERR_NOT_FOUND = 2,        /* no such file, directory, or cached repo */
  HEARTH_ERR_CANCELLED = 3,        /* a progress callback returned 0 */
  HEARTH_ERR_BUFFER_TOO_SMALL = 4, /* the output buffer is too small; *size says how much */
  HEARTH_ERR_BAD_STATE = 5,        /* a call out of order (sample before prefill), foreign state */
  HEARTH_ERR_CONTEXT_FULL = 6,     /* the tokens do not fit the session's context */
  HEARTH_ERR_FAILED = 7,           /* the engine reported an error (bad file, ...): see message */
  HEARTH_ERR_OUT_OF_MEMORY = 8,
  HEARTH_ERR_INTERNAL = 9 /* a bug in Hearth: please report the message */
};

/* The message of the last failed hearth_* call on the calling thread ("" after a success).
 * Owned by the library; valid until the next hearth_* call on this thread. Never NULL. */
HEARTH_API const char* hearth_last_error(void);
/* "HEARTH_ERR_NOT_FOUND" etc.; "HEARTH_ERR_UNKNOWN" for codes this library does not know. */
HEARTH_API const char* hearth_status_name(hearth_status status);

/* ---- Handles ---------------------------------------------------------------------------- */

/* A loaded model (weights, tokenizer, chat template). Immutable; safe to use from many threads
 * at once (tokenize, embed, create sessions). */
typedef struct hearth_model hearth_model;
/* A conversation: KV cache, token history, sampler. Use from one thread at a time. */
typedef struct hearth_session hearth_session;

/* ---- Models ----------------------------------------------------------------------------- */

/* Load progress in [0, 1]. Return nonzero to continue, 0 to cancel the load. */
typedef int32_t (*hearth_progress_callback)(float fraction, void* user_data);

/* Size-tagged: call hearth_model_params_init(&p, sizeof p) first, then change fields. */
typedef struct hearth_model_params {
  size_t struct_size;
  int32_t n_threads;  /* CPU threads for this model's forward passes; 0: all cores */
  int32_t gpu_layers; /* layers on the GPU (-1: all; -2: as many as fit its free memory;
                        falls back to CPU without a GPU) */
  hearth_progress_callback progress; /* may be NULL */
  void* progress_user_data;
  int32_t offline; /* repo ids: 1 = resolve from the HF cache only, never download */
  /* Backend choices (added after v1: a caller built against v1 gets their defaults). */
  int32_t no_weight_cache;  /* 1: repack CPU weights in memory every load (no on-disk cache) */
  int32_t cache_verify;     /* how a load checks the on-disk cache: HEARTH_CACHE_VERIFY_* */
  int32_t no_amx;           /* 1: CPU prefill matmuls without the AMX matrix engine */
  int32_t amx_min_tokens;   /* tokens from which AMX prefill starts; 0: measured per type */
  int32_t no_cuda_graphs;   /* 1: GPU decode steps launch kernels one by one (no graphs) */
  int32_t cuda_chain_depth; /* greedy steps queued on the GPU, 0 (off) to 8; default 3 */
  int32_t n_cpu_moe;    /* MoE layers whose router and experts stay on the CPU: 0 none (default),
                           N the first N, -1 all (llama.cpp's --n-cpu-moe / --cpu-moe) */
  int32_t decode_lanes; /* CPU decode steps of several sequences: HEARTH_DECODE_LANES_* */
} hearth_model_params;

/* hearth_model_params.decode_lanes (--decode-lanes): a step as lanes, a group of sequences a
   thread (ON), as one pass over all of them (OFF), or whichever timing finds faster (AUTO). */
enum { HEARTH_DECODE_LANES_AUTO = 0, HEARTH_DECODE_LANES_ON = 1, HEARTH_DECODE_LANES_OFF = 2 };

/* hearth_model_params.cache_verify */
enum {
  HEARTH_CACHE_VERIFY_LAZY = 0,   /* sampled slices at load, the rest in the background */
  HEARTH_CACHE_VERIFY_SAMPLE = 1, /* sampled slices at load only */
  HEARTH_CACHE_VERIFY_FULL = 2    /* every slice at load */
};

HEARTH_API hearth_status hearth_model_params_init(hearth_model_params* params, size_t struct_size);

/* path_or_repo: a GGUF file, a Hugging Face model directory, or a Hub repo id ORG/NAME[:QUANT]
 * (resolved through the HF cache, downloading unless offline or HF_HUB_OFFLINE=1). An existing
 * path always wins. params may be NULL (defaults). On success *out owns the model. */
HEARTH_API hearth_status hearth_model_load(const char* path_or_repo,
                                           const hearth_model_params* params, hearth_model** out);
/* Releases the app's reference. Sessions keep the model alive until they are freed. NULL ok. */
HEARTH_API void hearth_model_free(hearth_model* model);

typedef struct hearth_model_info {
  size_t struct_size; /* set by the caller to sizeof(hearth_model_info) */
  int32_t n_vocab;
  int32_t n_embd; /* also the embedding length */
  int32_t n_layer;
  int32_t n_ctx_train; /* context length the model was trained with */
  int32_t bos_token;   /* -1 when none */
  int32_t eos_token;   /* -1 when none */
  /* Owned by the model, valid while it lives. */
  const char* name;         /* general.name or the file name */
  const char* architecture; /* "llama", "qwen2", ... */
  const char* path;         /* the local file or directory that was loaded */
} hearth_model_info;

HEARTH_API hearth_status hearth_model_get_info(const hearth_model* model, hearth_model_info* out);

/* ---- Tokens ----------------------------------------------------------------------------- */

enum {
  HEARTH_TOKENIZE_ADD_SPECIAL = 1,          /* add BOS/EOS as the model's rules say */
  HEARTH_TOKENIZE_PARSE_SPECIAL = 2,        /* recognise control-token text such as "<s>" */
  HEARTH_DETOKENIZE_STRIP_LEADING_SPACE = 1 /* drop the SentencePiece space of the first token */
};

/* text: text_len bytes (need not be NUL-terminated). Writes up to capacity ids to tokens (may be
 * NULL when capacity is 0); *n_tokens is always the full count, so a too-small buffer gives
 * HEARTH_ERR_BUFFER_TOO_SMALL and the size to retry with. */
HEARTH_API hearth_status hearth_tokenize(const hearth_model* model, const char* text,
                                         size_t text_len, uint32_t flags, int32_t* tokens,
                                         size_t capacity, size_t* n_tokens);

/* Text of n_tokens ids (valid UTF-8; broken sequences become U+FFFD). Writes a NUL-terminated
 * string when capacity > *length; *length excludes the NUL. */
HEARTH_API hearth_status hearth_detokenize(const hearth_model* model, const int32_t* tokens,
                                           size_t n_tokens, uint32_t flags, char* text,
                                           size_t capacity, size_t* length);

/* The raw bytes one token contributes (may be part of a UTF-8 character); buffer as above. */
HEARTH_API hearth_status hearth_token_to_piece(const hearth_model* model, int32_t token,
                                               char* piece, size_t capacity, size_t* length);

/* *is_end: 1 when `token` ends generation (EOS, EOT, ...), else 0. */
HEARTH_API hearth_status hearth_token_is_end(const hearth_model* model, int32_t token,
                                             int32_t* is_end);

/* ---- Sampling and sessions -------------------------------------------------------------- */

/* The sampling chain: penalties -> top-k -> top-p -> min-p -> temperature -> draw. */
typedef struct hearth_sampling_params {
  size_t struct_size;
  float temperature;     /* <= 0: greedy (argmax, lowest id wins ties) */
  int32_t top_k;         /* <= 0: off */
  float top_p;           /* >= 1: off */
  float min_p;           /* <= 0: off */
  float repeat_penalty;  /* 1: off */
  int32_t repeat_last_n; /* tokens the penalties look at (-1: all) */
  float presence_penalty;
  float frequency_penalty;
  uint64_t seed; /* 0xFFFFFFFF: a random seed */
} hearth_sampling_params;

HEARTH_API hearth_status hearth_sampling_params_init(hearth_sampling_params* params,
                                                     size_t struct_size);

/* KV cache element types (ggml's type ids, as llama.cpp's type_k / type_v): f16 halves f32's
 * memory; q8_0 (blocks of 32 values with one f16 scale) needs a head size that is a multiple
 * of 32. */
enum {
  HEARTH_CACHE_TYPE_F32 = 0,
  HEARTH_CACHE_TYPE_F16 = 1,
  HEARTH_CACHE_TYPE_Q8_0 = 8,
  HEARTH_CACHE_TYPE_BF16 = 30
};

typedef struct hearth_session_params {
  size_t struct_size;
  int32_t n_ctx; /* context length in tokens; 0: the model's training context */
  const hearth_sampling_params* sampling; /* NULL: defaults; copied at creation */
  /* Appended after v1 (an older, smaller struct_size gets the defaults): */
  int32_t cache_type_k; /* HEARTH_CACHE_TYPE_*; default F16 */
  int32_t cache_type_v; /* HEARTH_CACHE_TYPE_*; default F16 */
} hearth_session_params;

HEARTH_API hearth_status hearth_session_params_init(hearth_session_params* params,
                                                    size_t struct_size);

/* params may be NULL (defaults). The session holds a reference to the model. */
HEARTH_API hearth_status hearth_session_create(hearth_model* model,
                                               const hearth_session_params* params,
                                               hearth_session** out);
HEARTH_API void hearth_session_free(hearth_session* session); /* NULL ok */

/* Replaces the sampling chain (and restarts its random stream from the seed). */
HEARTH_API hearth_status hearth_session_set_sampling(hearth_session* session,
                                                     const hearth_sampling_params* params);
/* Constrained output for the session's next hearth_session_generate calls: every generated
 * text then matches the grammar (generation ends when it is complete, or at the budget with it
 * complete). text: a GBNF grammar (llama.cpp syntax) or a JSON Schema; ignored (may be NULL) for
 * TEXT, which removes the constraint, and JSON_OBJECT (any JSON object). A grammar or schema
 * that does not compile fails with HEARTH_ERR_INVALID_ARGUMENT and a message naming the line or
 * the keyword; the session keeps its previous format then. */
enum {
  HEARTH_FORMAT_TEXT = 0,
  HEARTH_FORMAT_GBNF = 1,
  HEARTH_FORMAT_JSON_SCHEMA = 2,
  HEARTH_FORMAT_JSON_OBJECT = 3
};
HEARTH_API hearth_status hearth_session_set_output_format(hearth_session* session, int32_t format,
                                                          const char* text);
/* Forgets the conversation (the KV memory is kept for reuse). */
HEARTH_API hearth_status hearth_session_reset(hearth_session* session);

/* Step by step. prefill appends tokens to the conversation and computes the logits of the last;
 * decode appends one token; sample draws the next token from the current logits (it does not
 * append it: pass it to decode). logits points into the session, valid until its next call. */
HEARTH_API hearth_status hearth_session_prefill(hearth_session* session, const int32_t* tokens,
                                                size_t n_tokens);
HEARTH_API hearth_status hearth_session_decode(hearth_session* session, int32_t token);
HEARTH_API hearth_status hearth_session_sample(hearth_session* session, int32_t* token);
HEARTH_API hearth_status hearth_session_logits(hearth_session* session, const float** logits,
                                               size_t* n_vocab);
/* The conversation's tokens so far (prompt + generated); buffer rules as hearth_tokenize. */
HEARTH_API hearth_status hearth_session_history(const hearth_session* session, int32_t* tokens,
                                                size_t capacity, size_t* n_tokens);

/* ---- Generation ------------------------------------------------------------------------- */

/* Called for each generated token with the text it completes (NUL-terminated, may be "" while a
 * UTF-8 character or a possible stop string is held back). A final call with token -1 delivers
 * held-back text. Return nonzero to continue, 0 to stop (finish reason CANCELLED). */
typedef int32_t (*hearth_token_callback)(int32_t token, const char* piece, size_t piece_len,
                                         void* user_data);

typedef struct hearth_generate_params {
  size_t struct_size;
  int32_t max_tokens;      /* -1: until end of generation or a full context */
  int32_t ignore_eos;      /* 1: keep going past end-of-generation tokens */
  const char* const* stop; /* n_stop stop strings (not part of the output); may be NULL */
  size_t n_stop;
} hearth_generate_params;

HEARTH_API hearth_status hearth_generate_params_init(hearth_generate_params* params,
                                                     size_t struct_size);

enum {
  HEARTH_FINISH_STOP = 1,      /* end-of-generation token or a stop string */
  HEARTH_FINISH_LENGTH = 2,    /* max_tokens reached */
  HEARTH_FINISH_CANCELLED = 3, /* the callback returned 0 */
  HEARTH_FINISH_CONTEXT = 4    /* the context is full */
};

typedef struct hearth_generate_result {
  size_t struct_size; /* set by the caller */
  int32_t finish_reason;
  int32_t n_prompt_tokens;    /* tokens evaluated for this call's prompt, cache hits included */
  int32_t n_prompt_evaluated; /* of which actually computed */
  int32_t n_generated;
  double prompt_ms, ttft_ms, gen_ms;
} hearth_generate_result;

/* Appends prompt (n_prompt may be 0 to continue the conversation) and generates with the
 * session's sampling chain, streaming through callback (may be NULL). Generated tokens join the
 * conversation. params and result may be NULL. */
HEARTH_API hearth_status hearth_session_generate(hearth_session* session, const int32_t* prompt,
                                                 size_t n_prompt,
                                                 const hearth_generate_params* params,
                                                 hearth_token_callback callback, void* user_data,
                                                 hearth_generate_result* result);

/* ---- KV state ----------------------------------------------------------------------------- */

/* Serialises the conversation (tokens, KV cache, current logits) into buffer; buffer rules as
 * hearth_tokenize (*size in bytes). The blob is for the same model on the same machine. */
HEARTH_API hearth_status hearth_session_state_save(hearth_session* session, void* buffer,
                                                   size_t capacity, size_t* size);
/* Restores a blob from hearth_session_state_save (any session of the same model with a context
 * large enough and the same cache types: a blob records its K/V element types, and another
 * session's types are HEARTH_ERR_BAD_STATE naming both). Generation then continues exactly as
 * it would have. */
HEARTH_API hearth_status hearth_session_state_load(hearth_session* session, const void* buffer,
                                                   size_t size);

/* ---- Embeddings and chat ---------------------------------------------------------------- */

/* A sentence embedding of n_tokens ids: the final (normed) hidden states mean-pooled over the
 * tokens and L2-normalised. *n_embd = model n_embd floats; buffer rules as hearth_tokenize. */
HEARTH_API hearth_status hearth_embed(const hearth_model* model, const int32_t* tokens,
                                      size_t n_tokens, float* embedding, size_t capacity,
                                      size_t* n_embd);

/* One chat message. Frozen layout (used in arrays): new fields would mean a new struct. */
typedef struct hearth_chat_message {
  const char* role; /* "system", "user", "assistant", ... */
  const char* content;
} hearth_chat_message;

/* Renders messages into a prompt with a chat template. chat_template: NULL = the model's own
 * (or, when it has none, a built-in picked from its name/architecture); a built-in name
 * ("llama2", "llama3", "chatml", "mistral", "gemma"); or Jinja template text. model may be NULL
 * when chat_template is given (then bos/eos are ""). Output buffer rules as hearth_detokenize. */
HEARTH_API hearth_status hearth_chat_render(const hearth_model* model, const char* chat_template,
                                            const hearth_chat_message* messages, size_t n_messages,
                                            int32_t add_generation_prompt, char* text,
                                            size_t capacity, size_t* length);

enum {
  /* Trusted input only: special-token texts in roles and contents ("</s>") become control
   * tokens. Without it they are text; only the template's own text yields control tokens. */
  HEARTH_CHAT_CONTENT_SPECIAL = 1,
};
/* Renders messages as hearth_chat_render does and tokenizes the prompt (nothing added: the
 * template writes BOS). Use this rather than hearth_chat_render + hearth_tokenize with
 * HEARTH_TOKENIZE_PARSE_SPECIAL, which lets a message forge turns and stops. Buffer rules as
 * hearth_tokenize. */
HEARTH_API hearth_status hearth_chat_tokenize(const hearth_model* model, const char* chat_template,
                                              const hearth_chat_message* messages,
                                              size_t n_messages, int32_t add_generation_prompt,
                                              uint32_t flags, int32_t* tokens, size_t capacity,
                                              size_t* n_tokens);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HEARTH_HEARTH_H_ */
