// llama_ref: logits and greedy decode from llama.cpp, as the numerics reference for spore's LLM path.
//
//   llama_ref MODEL.gguf --tokens 1,2,3 [--n-decode 32] [--threads 2] [--ctk f32|f16] [--flash-attn]
//             [--no-repack] [--verbose] --out DIR
//
// The prompt tokens are used exactly as given (no BOS/EOS is added, nothing is tokenized) and evaluated as one
// batch at positions 0..n_prompt-1, with logits kept for the last prompt token only. Then N tokens are decoded
// greedily, one at a time (argmax, ties to the lowest id). Writes
//   DIR/logits.f32  (1+N) x n_vocab little-endian float32: row 0 after the prompt, row i after the i-th greedy token
//   DIR/tokens.txt  the N greedy token ids, one per line
//   DIR/meta.json   sizes, KV cache type, attention path, rope type, timings
// The KV cache is F32 unless --ctk f16 (both K and V), and attention is the plain (non-flash) path unless
// --flash-attn, so F32 models can be compared at ~1e-4. CPU only.
#include <llama.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& msg) {
    std::fprintf(stderr, "llama_ref: %s\n", msg.c_str());
    std::exit(1);
}

void usage() {
    std::fprintf(stderr,
                 "usage: llama_ref MODEL.gguf --tokens ID,ID,... [--n-decode N=32] [--threads T=2] "
                 "[--ctk f32|f16] [--flash-attn] [--no-repack] [--verbose] --out DIR\n");
    std::exit(2);
}

bool g_verbose = false;

void log_cb(ggml_log_level level, const char* text, void*) {
    if (g_verbose || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

long parse_int(const std::string& s, const char* what) {
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno != 0) die(std::string("bad ") + what + ": '" + s + "'");
    return v;
}

std::vector<llama_token> parse_tokens(const std::string& s) {
    std::vector<llama_token> out;
    size_t p = 0;
    while (p <= s.size()) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        long v = parse_int(s.substr(p, q - p), "token id in --tokens");
        if (v < 0 || v > INT32_MAX) die("token id out of range in --tokens: " + std::to_string(v));
        out.push_back(static_cast<llama_token>(v));
        p = q + 1;
    }
    return out;
}

// Greedy choice: the largest logit, the lowest id among equals (strict '>' keeps the first maximum).
llama_token argmax(const float* x, int n) {
    int best = 0;
    for (int i = 1; i < n; ++i)
        if (x[i] > x[best]) best = i;
    return best;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    std::string model_path, out_dir, tokens_arg, ctk = "f32";
    long n_decode = 32, n_threads = 2;
    bool flash_attn = false, repack = true;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) die("missing value after " + a);
            return argv[++i];
        };
        if (a == "--tokens") tokens_arg = next();
        else if (a == "--n-decode") n_decode = parse_int(next(), "--n-decode");
        else if (a == "--threads") n_threads = parse_int(next(), "--threads");
        else if (a == "--ctk") ctk = next();
        else if (a == "--out") out_dir = next();
        else if (a == "--flash-attn") flash_attn = true;
        else if (a == "--no-repack") repack = false;
        else if (a == "--verbose") g_verbose = true;
        else if (a == "-h" || a == "--help") usage();
        else if (!a.empty() && a[0] == '-') die("unknown option " + a);
        else if (model_path.empty()) model_path = a;
        else die("unexpected argument " + a);
    }
    if (model_path.empty() || out_dir.empty() || tokens_arg.empty()) usage();
    if (n_decode < 0 || n_decode > 1000000) die("--n-decode must be in [0, 1000000]");
    if (n_threads < 1 || n_threads > 1024) die("--threads must be in [1, 1024]");
    ggml_type kv_type;
    if (ctk == "f32") kv_type = GGML_TYPE_F32;
    else if (ctk == "f16") kv_type = GGML_TYPE_F16;
    else die("--ctk must be f32 or f16, got '" + ctk + "'");
    const std::vector<llama_token> prompt = parse_tokens(tokens_arg);
    const int n_prompt = static_cast<int>(prompt.size());
    if (n_prompt < 1) die("--tokens needs at least one token");

    llama_log_set(log_cb, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = repack;  // CPU weight repacking (e.g. Q4_0/Q8_0 interleaved layouts)
    llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) die("cannot load model " + model_path + " (run with --verbose for llama.cpp's log)");
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (int i = 0; i < n_prompt; ++i)
        if (prompt[i] >= n_vocab)
            die("prompt token " + std::to_string(i) + " = " + std::to_string(prompt[i]) + " is outside the vocab (" +
                std::to_string(n_vocab) + " tokens)");

    llama_context_params cp = llama_context_default_params();
    const uint32_t n_ctx = static_cast<uint32_t>(n_prompt + n_decode);
    cp.n_ctx = n_ctx;
    cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(n_prompt);  // the prompt is one physical batch
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = static_cast<int32_t>(n_threads);
    cp.flash_attn_type = flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = kv_type;
    cp.no_perf = true;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) die("cannot create a context for " + model_path + " (run with --verbose for llama.cpp's log)");

    std::vector<float> logits(static_cast<size_t>(1 + n_decode) * n_vocab);
    std::vector<llama_token> greedy;
    size_t n_nonfinite = 0;
    auto keep_row = [&](int row, int batch_index) {
        const float* src = llama_get_logits_ith(ctx, batch_index);
        if (!src) die("llama_get_logits_ith returned no logits for row " + std::to_string(row));
        float* dst = logits.data() + static_cast<size_t>(row) * n_vocab;
        std::memcpy(dst, src, sizeof(float) * n_vocab);
        for (int i = 0; i < n_vocab; ++i) n_nonfinite += !std::isfinite(dst[i]);
        return dst;
    };

    // Prompt: one batch, explicit positions 0..n_prompt-1 in sequence 0, output for the last token only.
    llama_batch batch = llama_batch_init(n_prompt, 0, 1);
    for (int i = 0; i < n_prompt; ++i) {
        batch.token[i] = prompt[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = i == n_prompt - 1;
    }
    batch.n_tokens = n_prompt;
    auto t0 = std::chrono::steady_clock::now();
    if (int rc = llama_decode(ctx, batch); rc != 0) die("llama_decode of the prompt failed: " + std::to_string(rc));
    const float* row = keep_row(0, n_prompt - 1);
    const double prompt_ms = ms_since(t0);

    t0 = std::chrono::steady_clock::now();
    for (int step = 1; step <= n_decode; ++step) {
        const llama_token tok = argmax(row, n_vocab);
        greedy.push_back(tok);
        batch.token[0] = tok;
        batch.pos[0] = n_prompt + step - 1;
        batch.n_seq_id[0] = 1;
        batch.seq_id[0][0] = 0;
        batch.logits[0] = 1;
        batch.n_tokens = 1;
        if (int rc = llama_decode(ctx, batch); rc != 0)
            die("llama_decode of greedy token " + std::to_string(step) + " failed: " + std::to_string(rc));
        row = keep_row(step, 0);
    }
    const double decode_ms = ms_since(t0);
    llama_batch_free(batch);

    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) die("cannot create " + out_dir + ": " + ec.message());
    const std::string base = out_dir + "/";
    if (FILE* f = std::fopen((base + "logits.f32").c_str(), "wb")) {
        const bool ok = std::fwrite(logits.data(), sizeof(float), logits.size(), f) == logits.size();
        if (std::fclose(f) != 0 || !ok) die("cannot write " + base + "logits.f32");
    } else {
        die("cannot open " + base + "logits.f32");
    }
    if (FILE* f = std::fopen((base + "tokens.txt").c_str(), "w")) {
        for (llama_token t : greedy) std::fprintf(f, "%d\n", t);
        if (std::fclose(f) != 0) die("cannot write " + base + "tokens.txt");
    } else {
        die("cannot open " + base + "tokens.txt");
    }
    char arch[128] = "?";
    llama_model_meta_val_str(model, "general.architecture", arch, sizeof arch);
    const int rope = llama_model_rope_type(model);
    if (FILE* f = std::fopen((base + "meta.json").c_str(), "w")) {
        std::fprintf(f,
                     "{\n  \"model\": \"%s\",\n  \"arch\": \"%s\",\n  \"n_vocab\": %d,\n  \"n_prompt\": %d,\n"
                     "  \"n_decode\": %ld,\n  \"kv_type\": \"%s\",\n  \"flash_attn\": %s,\n  \"repack\": %s,\n"
                     "  \"rope_type\": \"%s\",\n  \"n_ctx\": %u,\n  \"threads\": %ld,\n  \"add_bos\": false,\n"
                     "  \"n_nonfinite\": %zu,\n  \"prompt_ms\": %.3f,\n  \"decode_ms\": %.3f,\n"
                     "  \"llama_cpp_commit\": \"80fb11a\",\n  \"logits_layout\": \"(1+n_decode) x n_vocab, f32 LE\"\n}\n",
                     model_path.c_str(), arch, n_vocab, n_prompt, n_decode, ctk.c_str(), flash_attn ? "true" : "false",
                     repack ? "true" : "false",
                     rope == LLAMA_ROPE_TYPE_NORM ? "norm" : rope == LLAMA_ROPE_TYPE_NEOX ? "neox"
                                                                                           : std::to_string(rope).c_str(),
                     llama_n_ctx(ctx), n_threads, n_nonfinite, prompt_ms, decode_ms);
        if (std::fclose(f) != 0) die("cannot write " + base + "meta.json");
    } else {
        die("cannot open " + base + "meta.json");
    }
    std::printf("llama_ref: %s (%s), %d prompt tokens, %ld decoded, n_vocab %d, kv %s: prompt %.1f ms, decode %.1f ms"
                "%s -> %s\n",
                model_path.c_str(), arch, n_prompt, n_decode, n_vocab, ctk.c_str(), prompt_ms, decode_ms,
                n_nonfinite ? " (NON-FINITE LOGITS)" : "", out_dir.c_str());

    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return n_nonfinite ? 3 : 0;
}
