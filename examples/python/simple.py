#!/usr/bin/env python3
# simple.py: streams a completion from Python through libhearth's C API with ctypes (no build
# step). Mirrors examples/c/simple.c; declare more hearth_* calls the same way to use them.
import argparse
import ctypes
import ctypes.util
import os
import sys

HEARTH_OK = 0
HEARTH_ERR_BUFFER_TOO_SMALL = 4
HEARTH_TOKENIZE_ADD_SPECIAL = 1


class SamplingParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("temperature", ctypes.c_float),
                ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repeat_penalty", ctypes.c_float), ("repeat_last_n", ctypes.c_int32),
                ("presence_penalty", ctypes.c_float), ("frequency_penalty", ctypes.c_float),
                ("seed", ctypes.c_uint64)]


class SessionParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("n_ctx", ctypes.c_int32),
                ("sampling", ctypes.POINTER(SamplingParams))]


class GenerateParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("max_tokens", ctypes.c_int32),
                ("ignore_eos", ctypes.c_int32), ("stop", ctypes.POINTER(ctypes.c_char_p)),
                ("n_stop", ctypes.c_size_t)]


TOKEN_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_char),
                                  ctypes.c_size_t, ctypes.c_void_p)


def load_library(path):
    lib = ctypes.CDLL(path or ctypes.util.find_library("hearth") or "libhearth.so")
    P = ctypes.c_void_p
    lib.hearth_version.restype = ctypes.c_char_p
    lib.hearth_last_error.restype = ctypes.c_char_p
    lib.hearth_model_load.argtypes = [ctypes.c_char_p, P, ctypes.POINTER(P)]
    lib.hearth_model_free.argtypes = [P]
    lib.hearth_tokenize.argtypes = [P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32,
                                    ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                    ctypes.POINTER(ctypes.c_size_t)]
    lib.hearth_sampling_params_init.argtypes = [ctypes.POINTER(SamplingParams), ctypes.c_size_t]
    lib.hearth_session_params_init.argtypes = [ctypes.POINTER(SessionParams), ctypes.c_size_t]
    lib.hearth_generate_params_init.argtypes = [ctypes.POINTER(GenerateParams), ctypes.c_size_t]
    lib.hearth_session_create.argtypes = [P, ctypes.POINTER(SessionParams), ctypes.POINTER(P)]
    lib.hearth_session_free.argtypes = [P]
    lib.hearth_session_generate.argtypes = [P, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                            ctypes.POINTER(GenerateParams), TOKEN_CALLBACK, P, P]
    return lib


def check(lib, status, what):
    if status != HEARTH_OK:
        raise RuntimeError(f"{what}: {lib.hearth_last_error().decode()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-m", "--model", required=True, help=".gguf file, HF directory or repo id")
    ap.add_argument("-p", "--prompt", default="Once upon a time")
    ap.add_argument("-n", "--n-predict", type=int, default=32)
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--ids", action="store_true", help="print generated ids on stderr")
    ap.add_argument("--lib", default=os.environ.get("HEARTH_LIB"), help="path of libhearth.so")
    args = ap.parse_args()

    lib = load_library(args.lib)
    print("hearth", lib.hearth_version().decode(), file=sys.stderr)
    model = ctypes.c_void_p()
    check(lib, lib.hearth_model_load(args.model.encode(), None, ctypes.byref(model)), "load")
    try:
        text = args.prompt.encode()
        n = ctypes.c_size_t(0)
        lib.hearth_tokenize(model, text, len(text), HEARTH_TOKENIZE_ADD_SPECIAL, None, 0,
                            ctypes.byref(n))
        tokens = (ctypes.c_int32 * n.value)()
        check(lib, lib.hearth_tokenize(model, text, len(text), HEARTH_TOKENIZE_ADD_SPECIAL,
                                       tokens, n.value, ctypes.byref(n)), "tokenize")

        sampling = SamplingParams()
        check(lib, lib.hearth_sampling_params_init(ctypes.byref(sampling),
                                                   ctypes.sizeof(sampling)), "sampling")
        sampling.temperature = args.temp
        sampling.seed = args.seed
        sp = SessionParams()
        check(lib, lib.hearth_session_params_init(ctypes.byref(sp), ctypes.sizeof(sp)), "params")
        sp.sampling = ctypes.pointer(sampling)
        session = ctypes.c_void_p()
        check(lib, lib.hearth_session_create(model, ctypes.byref(sp), ctypes.byref(session)),
              "session")
        gp = GenerateParams()
        check(lib, lib.hearth_generate_params_init(ctypes.byref(gp), ctypes.sizeof(gp)), "gen")
        gp.max_tokens = args.n_predict
        gp.ignore_eos = 1

        ids = []

        def on_token(token, piece, length, _user):
            # Pieces are whole UTF-8 characters (the library holds partial ones back).
            if token >= 0:
                ids.append(token)
            sys.stdout.write(ctypes.string_at(piece, length).decode("utf-8", errors="replace"))
            sys.stdout.flush()
            return 1

        callback = TOKEN_CALLBACK(on_token)  # keep a reference while C may call it
        sys.stdout.write(args.prompt)
        check(lib, lib.hearth_session_generate(session, tokens, n.value, ctypes.byref(gp),
                                               callback, None, None), "generate")
        print()
        if args.ids:
            print("ids: " + " ".join(map(str, ids)), file=sys.stderr)
        lib.hearth_session_free(session)
    finally:
        lib.hearth_model_free(model)


if __name__ == "__main__":
    main()
