/* simple.c: streams a completion through the Hearth C API (load, tokenize, generate with a token
 * callback). Build it with examples/c/CMakeLists.txt (find_package) or examples/c/Makefile. */
#include <hearth/hearth.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(const char* argv0) {
  fprintf(stderr,
          "usage: %s -m MODEL [-p PROMPT] [-n N_TOKENS] [--temp T] [--seed S] [--ids]\n"
          "  MODEL: a .gguf file, a Hugging Face model directory, or a repo id ORG/NAME\n"
          "  --ids: also print the generated token ids on stderr (\"ids: 1 2 3\")\n",
          argv0);
}

/* Streams each piece of text as it is generated; collects ids for --ids. */
struct stream {
  int32_t ids[4096];
  size_t n_ids;
};

static int32_t on_token(int32_t token, const char* piece, size_t len, void* user_data) {
  struct stream* s = (struct stream*)user_data;
  fwrite(piece, 1, len, stdout);
  fflush(stdout);
  if (token >= 0 && s->n_ids < sizeof s->ids / sizeof s->ids[0]) s->ids[s->n_ids++] = token;
  return 1; /* keep going */
}

static int fail(const char* what, hearth_status status) {
  fprintf(stderr, "%s failed (%s): %s\n", what, hearth_status_name(status), hearth_last_error());
  return 1;
}

int main(int argc, char** argv) {
  const char* model_path = NULL;
  const char* prompt = "Once upon a time";
  int n_predict = 32, print_ids = 0;
  float temp = 0.0f; /* greedy by default: reproducible */
  unsigned long long seed = 42;
  for (int i = 1; i < argc; ++i) {
    const int more = i + 1 < argc;
    if (!strcmp(argv[i], "-m") && more)
      model_path = argv[++i];
    else if (!strcmp(argv[i], "-p") && more)
      prompt = argv[++i];
    else if (!strcmp(argv[i], "-n") && more)
      n_predict = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--temp") && more)
      temp = (float)atof(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && more)
      seed = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--ids"))
      print_ids = 1;
    else {
      usage(argv[0]);
      return 2;
    }
  }
  if (!model_path) {
    usage(argv[0]);
    return 2;
  }
  fprintf(stderr, "hearth %s\n", hearth_version());

  hearth_model* model = NULL;
  hearth_status st = hearth_model_load(model_path, NULL, &model);
  if (st != HEARTH_OK) return fail("hearth_model_load", st);

  /* Tokenize: ask for the size first, then fill. */
  size_t n_prompt = 0;
  st = hearth_tokenize(model, prompt, strlen(prompt), HEARTH_TOKENIZE_ADD_SPECIAL, NULL, 0,
                       &n_prompt);
  int32_t* tokens = malloc((n_prompt ? n_prompt : 1) * sizeof *tokens);
  st = hearth_tokenize(model, prompt, strlen(prompt), HEARTH_TOKENIZE_ADD_SPECIAL, tokens, n_prompt,
                       &n_prompt);
  if (st != HEARTH_OK) return fail("hearth_tokenize", st);

  hearth_sampling_params sampling;
  hearth_sampling_params_init(&sampling, sizeof sampling);
  sampling.temperature = temp;
  sampling.seed = seed;
  hearth_session_params sp;
  hearth_session_params_init(&sp, sizeof sp);
  sp.sampling = &sampling;
  hearth_session* session = NULL;
  st = hearth_session_create(model, &sp, &session);
  if (st != HEARTH_OK) return fail("hearth_session_create", st);

  hearth_generate_params gp;
  hearth_generate_params_init(&gp, sizeof gp);
  gp.max_tokens = n_predict;
  gp.ignore_eos = 1; /* a fixed-length continuation (as the goldens are made) */
  hearth_generate_result result;
  memset(&result, 0, sizeof result);
  result.struct_size = sizeof result;
  static struct stream stream;
  fputs(prompt, stdout);
  st = hearth_session_generate(session, tokens, n_prompt, &gp, on_token, &stream, &result);
  if (st != HEARTH_OK) return fail("hearth_session_generate", st);
  printf("\n");
  fprintf(stderr, "%d prompt tokens, %d generated, %.1f ms to first token\n",
          result.n_prompt_tokens, result.n_generated, result.ttft_ms);
  if (print_ids) {
    fprintf(stderr, "ids:");
    for (size_t i = 0; i < stream.n_ids; ++i) fprintf(stderr, " %d", stream.ids[i]);
    fprintf(stderr, "\n");
  }
  free(tokens);
  hearth_session_free(session);
  hearth_model_free(model);
  return 0;
}
