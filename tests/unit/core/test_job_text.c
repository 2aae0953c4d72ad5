/* test_job_text.c - the job text grammar of core/job_spec.c: the canonical
 * text round-trips (format -> parse -> format is identical, the spec is
 * the same) for the defaults, a spec with every field changed and many
 * random ones; the lenient grammar (spaces, tabs, CR, comments, blank
 * lines, last value wins, unnamed keys kept); malformed text gets an error
 * naming its line and key, never a crash (a key=value whose '=' lies past
 * byte 1023, the coordinator's old --set bug); stk_job_text_get; job
 * files; validation refusing what would not round-trip; and the
 * bad_samples key (its forms kept canonical, refusals, left out of the
 * text and hash while default, the policy's answers).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "stoker/core.h"

/* format(a) -> parse onto a spec pre-filled with junk -> format again:
 * same text, same fields. */
static void roundtrip(const stk_job_spec *a) {
  static char t1[16384], t2[16384];
  char err[256] = "";
  size_t n1 = stk_job_spec_format(a, t1, sizeof t1);
  CHECK(n1 > 0 && n1 < sizeof t1);
  stk_job_spec b;
  memset(&b, 0x5a, sizeof b); /* every named field must be overwritten */
  memcpy(b.reserved, a->reserved, sizeof b.reserved);
  /* and the keys the canonical text leaves out at their default */
  b.name[0] = b.dataset[0] = b.plugin[0] = b.chain[0] = b.bad_samples[0] = 0;
  b.views = 1;
  b.in_order = 0;
  int rc = stk_job_spec_parse(&b, t1, err, sizeof err);
  CHECK(rc == STK_OK);
  if (rc != STK_OK) fprintf(stderr, "parse: %s\n--- text:\n%s", err, t1);
  size_t n2 = stk_job_spec_format(&b, t2, sizeof t2);
  CHECK_EQ_U64(n1, n2);
  CHECK(strcmp(t1, t2) == 0);
  CHECK(stk_job_spec_hash(a) == stk_job_spec_hash(&b));
  /* field by field (the strings only up to their NUL) */
  CHECK(strcmp(a->name, b.name) == 0 && strcmp(a->dataset, b.dataset) == 0);
  CHECK(memcmp(&a->num_samples, &b.num_samples,
               offsetof(stk_job_spec, plugin) - offsetof(stk_job_spec, num_samples)) ==
        0);
  CHECK(strcmp(a->plugin, b.plugin) == 0 && strcmp(a->chain, b.chain) == 0);
  CHECK(a->source == b.source);
  CHECK(strcmp(a->bad_samples, b.bad_samples) == 0);
}

static void test_roundtrip_defaults(void) {
  stk_job_spec a;
  stk_job_spec_defaults(&a);
  roundtrip(&a);
}

static void test_roundtrip_every_field(void) {
  stk_job_spec a;
  stk_job_spec_defaults(&a);
  snprintf(a.name, sizeof a.name, "imagenet-train_v2.1");
  a.source = STK_SOURCE_TAR;
  snprintf(a.dataset, sizeof a.dataset, "imagenet/train shards (v2)/2024");
  a.num_samples = 1281167;
  a.pipeline = STK_PIPELINE_TRAIN;
  a.height = 176, a.width = 160, a.channels = 3;
  a.dtype = STK_DTYPE_BFLOAT16;
  a.layout = STK_LAYOUT_NHWC;
  a.batch_size = 256, a.world_size = 64;
  a.seed = UINT64_MAX;
  a.epochs = 90;
  a.drop_last = 0;
  a.num_classes = 1;
  a.synthetic_cost_us = 4000000000u;
  a.resize = 1;
  a.scale_min = 0.1f, a.scale_max = 0.3333333f;
  a.ratio_min = 1e-7f, a.ratio_max = 99.99999f;
  a.flip_p = 0.f;
  a.brightness = 0.4f, a.contrast = 1.0f / 3.0f, a.saturation = 0.7f;
  a.mean[0] = -0.5f, a.mean[1] = 1e30f, a.mean[2] = 3.14159274f;
  a.std[0] = 1e-6f, a.std[1] = 2.5f, a.std[2] = 0.224f;
  roundtrip(&a);
  snprintf(a.bad_samples, sizeof a.bad_samples, "substitute(0.5%%)");
  roundtrip(&a);
}

/* bad_samples: its forms, kept canonical; out of the canonical text (and
 * the hash) while default; the policy's answers. */
static void test_bad_samples(void) {
  stk_job_spec a, d;
  char err[256] = "", text[8192];
  stk_job_spec_defaults(&d);
  stk_job_spec_defaults(&a);
  CHECK(a.bad_samples[0] == 0);
  stk_job_spec_format(&a, text, sizeof text);
  CHECK(strstr(text, "bad_samples") == NULL);
  static const struct {
    const char *in, *canon;
  } ok[] = {{"fail", "fail"},
            {" substitute ", "substitute"},
            {"substitute( 7 )", "substitute(7)"},
            {"substitute(1%)", "substitute(1%)"},
            {"substitute(100 %)", "substitute(100%)"},
            {"substitute(0.25%)", "substitute(0.25%)"},
            {"substitute(999999999999999)", "substitute(999999999999999)"},
            {"", ""}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    CHECK(stk_job_spec_set(&a, "bad_samples", ok[i].in, err, sizeof err) == STK_OK);
    CHECK(strcmp(a.bad_samples, ok[i].canon) == 0);
    err[0] = 0; /* the defaults lack a name: only bad_samples matters here */
    stk_job_spec_validate(&a, err, sizeof err);
    CHECK(strstr(err, "bad_samples") == NULL);
    stk_job_spec_format(&a, text, sizeof text);
    CHECK((strstr(text, "bad_samples = ") != NULL) == (ok[i].canon[0] != 0));
    CHECK((stk_job_spec_hash(&a) == stk_job_spec_hash(&d)) == (ok[i].canon[0] == 0));
  }
  static const char *const refused[] = {
      "substitute(",    "substitute()",     "substitute(-1)",
      "substitute(0%)", "substitute(101%)", "substitute(1e400%)",
      "replace",        "fail(3)",          "substitute(1000000000000000)",
      "substitute(x%)"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    err[0] = 0;
    CHECK(stk_job_spec_set(&a, "bad_samples", refused[i], err, sizeof err) ==
          STK_INVALID_ARGUMENT);
    CHECK(strstr(err, "substitute(P%)") != NULL);
  }
  /* the default: a user-code error fails, corrupt files never */
  CHECK(stk_job_bad_samples_over(&d, 1, 1, 100) == 1);
  CHECK(stk_job_bad_samples_over(&d, 0, 1000, 100) == 0);
  CHECK(stk_job_spec_set(&a, "bad_samples", "fail", err, sizeof err) == STK_OK);
  CHECK(stk_job_bad_samples_over(&a, 0, 1, 100) == 1);
  CHECK(stk_job_bad_samples_over(&a, 0, 0, 100) == 0);
  CHECK(stk_job_spec_set(&a, "bad_samples", "substitute", err, sizeof err) == STK_OK);
  CHECK(stk_job_bad_samples_over(&a, 1000, 1000, 100) == 0);
  CHECK(stk_job_spec_set(&a, "bad_samples", "substitute(3)", err, sizeof err) == STK_OK);
  CHECK(stk_job_bad_samples_over(&a, 3, 3, 100) == 0);
  CHECK(stk_job_bad_samples_over(&a, 1, 4, 100) == 1);
  CHECK(stk_job_spec_set(&a, "bad_samples", "substitute(1%)", err, sizeof err) == STK_OK);
  CHECK(stk_job_bad_samples_budget(&a, 1, 1000) == 10);
  CHECK(stk_job_bad_samples_over(&a, 10, 10, 1000) == 0);
  CHECK(stk_job_bad_samples_over(&a, 0, 11, 1000) == 1);
  CHECK(stk_job_bad_samples_budget(&d, 1, 1000) == 0);
  CHECK(stk_job_bad_samples_budget(&d, 0, 1000) == UINT64_MAX);
}

/* Many random specs: floats of random bits (finite, |x| <= 1e30, which
 * is what a float key accepts), random integers and enums. */
static void test_roundtrip_random(void) {
  stk_rng r;
  stk_rng_init(&r, 7, 0, 0);
  for (int k = 0; k < 300; k++) {
    stk_job_spec a;
    stk_job_spec_defaults(&a);
    float *f[] = {&a.scale_min,  &a.scale_max, &a.ratio_min,  &a.ratio_max, &a.flip_p,
                  &a.brightness, &a.contrast,  &a.saturation, &a.mean[0],   &a.mean[1],
                  &a.mean[2],    &a.std[0],    &a.std[1],     &a.std[2]};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
      float v;
      do {
        uint32_t bits = stk_rng_u32(&r);
        memcpy(&v, &bits, sizeof v);
      } while (!(v == v) || v > 1e30f || v < -1e30f);
      *f[i] = v;
    }
    a.seed = (uint64_t)stk_rng_u32(&r) << 32 | stk_rng_u32(&r);
    a.num_samples = stk_rng_u32(&r);
    a.batch_size = stk_rng_u32(&r), a.world_size = stk_rng_u32(&r);
    a.height = stk_rng_u32(&r), a.width = stk_rng_u32(&r);
    a.source = 1 + (int32_t)(stk_rng_u32(&r) % 3);
    a.pipeline = 1 + (int32_t)(stk_rng_u32(&r) % 3);
    a.dtype = 1 + (int32_t)(stk_rng_u32(&r) % 3);
    a.layout = 1 + (int32_t)(stk_rng_u32(&r) % 2);
    a.drop_last = (int32_t)(stk_rng_u32(&r) & 1);
    a.in_order = (int32_t)(stk_rng_u32(&r) & 1);
    snprintf(a.name, sizeof a.name, "j%u", stk_rng_u32(&r));
    snprintf(a.dataset, sizeof a.dataset, "d/%u x", stk_rng_u32(&r));
    roundtrip(&a);
  }
}

static void test_lenient_grammar(void) {
  stk_job_spec s;
  stk_job_spec_defaults(&s);
  s.epochs = 5; /* not named below: kept */
  char err[256] = "";
  const char *text =
      "# a job\n"
      "\n"
      "  batch_size=7 \r\n"
      "\tseed =  9\t# trailing comment\n"
      "   # indented comment\n"
      "name=first\n"
      "dataset = some dir/with spaces  \n"
      "name = second"; /* no final newline; the last value wins */
  CHECK(stk_job_spec_parse(&s, text, err, sizeof err) == STK_OK);
  CHECK_EQ_U64(s.batch_size, 7);
  CHECK_EQ_U64(s.seed, 9);
  CHECK_EQ_U64(s.epochs, 5);
  CHECK(strcmp(s.name, "second") == 0);
  CHECK(strcmp(s.dataset, "some dir/with spaces") == 0);
  CHECK(stk_job_spec_parse(&s, "", err, sizeof err) == STK_OK);
  CHECK(stk_job_spec_parse(&s, "\n\n# nothing\n", NULL, 0) == STK_OK);
  CHECK_EQ_U64(s.batch_size, 7);
}

/* text must fail; err must hold every needle. */
static void bad(const char *text, const char *needle1, const char *needle2) {
  stk_job_spec s;
  stk_job_spec_defaults(&s);
  char err[256] = "";
  int rc = stk_job_spec_parse(&s, text, err, sizeof err);
  CHECK(rc == STK_INVALID_ARGUMENT);
  int ok = strstr(err, needle1) && (!needle2 || strstr(err, needle2));
  CHECK(ok);
  if (!ok) fprintf(stderr, "  message was: %s\n", err);
  CHECK(stk_job_spec_parse(&s, text, NULL, 0) == STK_INVALID_ARGUMENT);
}

static void test_malformed(void) {
  bad("batch_size 7\n", "job line 1: expected 'key = value'", NULL);
  bad("seed = 1\nepochs = 2\nnosuch = 3\n", "job line 3", "nosuch");
  bad("\n\nbatch_size = seven\n", "job line 3", "'batch_size'");
  bad("batch_size = -1", "job line 1", "batch_size");
  bad("world_size = 99999999999", "job line 1", "world_size");
  bad("source = floppy", "'source'", "floppy");
  bad("drop_last = maybe", "'drop_last'", NULL);
  bad("mean = 1,2", "'mean'", NULL);
  bad("mean = 1,2,3,4", "'mean'", NULL);
  bad("flip_p = nan", "'flip_p'", NULL);
  bad("scale_min = 1e31", "'scale_min'", NULL);
  bad("= 5", "job line 1", "unknown job key ''");
  /* A typo gets "did you mean"; an enum lists its values. */
  bad("bach_size = 4", "did you mean 'batch_size'?", "A job");
  bad("frobnicate = 4", "unknown job key 'frobnicate' (", NULL);
  bad("source = synthetc", "did you mean 'synthetic'?", "one of: synthetic, imagefolder");
  bad("dtype = f32", "'dtype': unknown value 'f32' (one of: uint8, float32, bfloat16)",
      NULL);
  /* A key=value line longer than 1024 bytes whose '=' lies past byte
   * 1023: refused as too long (a 1024-byte copy would lose the '='). */
  size_t n = 1100;
  char *kv = malloc(n + 3);
  memset(kv, 'a', n);
  memcpy(kv + n, "=1", 3);
  bad(kv, "job line 1: line too long", NULL);
  /* a long line after good ones: its number is named */
  char *two = malloc(n + 32);
  snprintf(two, n + 32, "seed = 1\nname = %s", kv);
  bad(two, "job line 2: line too long", NULL);
  /* a value too long for its field, but a line that fits */
  char longname[200];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  char line[256];
  snprintf(line, sizeof line, "name = %s", longname);
  bad(line, "job line 1", "'name' is too long");
  free(kv);
  free(two);
  /* parsing stops at the failing line: lines before it are applied */
  stk_job_spec s;
  stk_job_spec_defaults(&s);
  CHECK(stk_job_spec_parse(&s, "seed = 3\nbogus\nseed = 4\n", NULL, 0) ==
        STK_INVALID_ARGUMENT);
  CHECK_EQ_U64(s.seed, 3);
  CHECK(stk_job_spec_parse(&s, NULL, NULL, 0) == STK_INVALID_ARGUMENT);
  CHECK(stk_job_spec_parse(NULL, "seed = 1", NULL, 0) == STK_INVALID_ARGUMENT);
}

static void test_text_get(void) {
  stk_job_spec a;
  stk_job_spec_defaults(&a);
  a.batch_size = 48;
  char text[8192], v[64];
  stk_job_spec_format(&a, text, sizeof text);
  CHECK(stk_job_text_get(text, "batch_size", v, sizeof v) == STK_OK);
  CHECK(strcmp(v, "48") == 0);
  CHECK(stk_job_text_get(text, "source", v, sizeof v) == STK_OK);
  CHECK(strcmp(v, "synthetic") == 0);
  CHECK(stk_job_text_get(text, "mean", v, sizeof v) == STK_OK);
  CHECK(strncmp(v, "0.485", 5) == 0 && strchr(v, ',') != NULL);
  CHECK(stk_job_text_get(text, "nosuch", v, sizeof v) == STK_NOT_FOUND);
  CHECK(v[0] == 0);
  CHECK(stk_job_text_get(text, "batch", v, sizeof v) == STK_NOT_FOUND);
  const char *t = "# c\n name=a # x\nbroken line\nname = b  \nfuture_key = 1\n";
  CHECK(stk_job_text_get(t, "name", v, sizeof v) == STK_OK);
  CHECK(strcmp(v, "b") == 0);
  CHECK(stk_job_text_get(t, "future_key", v, sizeof v) == STK_OK);
  CHECK(strcmp(v, "1") == 0);
  CHECK(stk_job_text_get(t, "name", v, 1) == STK_LIMIT);
  CHECK(v[0] == 0);
  CHECK(stk_job_text_get("name = abcdef", "name", v, 4) == STK_LIMIT);
  CHECK(strcmp(v, "abc") == 0);
  CHECK(stk_job_text_get(t, "name", NULL, 0) == STK_OK);
  CHECK(stk_job_text_get(NULL, "name", v, sizeof v) == STK_INVALID_ARGUMENT);
}

static void write_file(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(data, 1, len, f) == len);
  fclose(f);
}

static void test_load(void) {
  char dir[] = "/tmp/stoker-jobtext-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[128], err[512];
  snprintf(path, sizeof path, "%s/job.conf", dir);
  stk_job_spec s;
  stk_job_spec_defaults(&s);
  const char *good = "# demo\nname = demo\nnum_samples = 100   # synthetic\n\nepochs=3\n";
  write_file(path, good, strlen(good));
  CHECK(stk_job_spec_load(&s, path, err, sizeof err) == STK_OK);
  CHECK(strcmp(s.name, "demo") == 0 && s.num_samples == 100 && s.epochs == 3);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);

  const char *wrong = "name = demo\n\nbatch_size = x\n";
  write_file(path, wrong, strlen(wrong));
  CHECK(stk_job_spec_load(&s, path, err, sizeof err) == STK_INVALID_ARGUMENT);
  char want[160];
  snprintf(want, sizeof want, "%s:3: 'batch_size'", path);
  CHECK(strstr(err, want) != NULL);

  write_file(path, "seed = 1\0\n", 10);
  CHECK(stk_job_spec_load(&s, path, err, sizeof err) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "NUL") != NULL);

  unlink(path);
  CHECK(stk_job_spec_load(&s, path, err, sizeof err) == STK_IO);
  CHECK(strstr(err, path) != NULL);
  rmdir(dir);
}

/* What the canonical text could not carry is refused up front. */
static void test_validate_guards_the_text(void) {
  stk_job_spec s;
  stk_job_spec_defaults(&s);
  s.source = STK_SOURCE_IMAGEFOLDER;
  s.pipeline = STK_PIPELINE_TRAIN;
  char err[256];
  const char *refused[] = {"a\nseed = 5", "a#b", "a\tb", " lead", "trail ", "a\rb"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    snprintf(s.dataset, sizeof s.dataset, "%s", refused[i]);
    CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_INVALID_ARGUMENT);
    CHECK(strstr(err, "dataset") != NULL);
  }
  snprintf(s.dataset, sizeof s.dataset, "in side/ok-1.x");
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  roundtrip(&s);
}

int main(void) {
  test_roundtrip_defaults();
  test_roundtrip_every_field();
  test_bad_samples();
  test_roundtrip_random();
  test_lenient_grammar();
  test_malformed();
  test_text_get();
  test_load();
  test_validate_guards_the_text();
  CHECK_DONE();
}
