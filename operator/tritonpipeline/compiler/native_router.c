/*
 * The native router: a Triton backend (libtriton_tprouter.so) that does what router_model.py does, without
 * the Python backend's round trip to its stub process. Each request's one input is copied to every
 * output the request asks for (the ensemble asks for the ones its consumers read; a direct request that
 * names none gets all of them), same datatype, same shape, in the memory the input lives in: a GPU
 * tensor is copied on the GPU (cudaMemcpyAsync with cudaMemcpyDefault, bound weakly to the server process's
 * CUDA runtime; no trip through the host), and the copies are waited for before the response is sent: the
 * consumers read the outputs on streams of their own (measured on an H100: without the wait, about one
 * request in a thousand at concurrency 16 got another request's numbers). The copies run on a stream of
 * the instance's own, created non-blocking on its GPU when it first copies: the legacy default stream would
 * wait for, and hold up, the work of every other model in this process that uses a blocking stream (each
 * GPU instance of a backend built on Triton's backend library has one). A request without the input (an optional pipeline input left out) gets a
 * response without outputs, so that the steps after it see their optional inputs left out too. BYTES
 * tensors are copied as Triton serializes them (each element's 4-byte length, then its bytes).
 *
 * Triton's backend C API is declared here from its documentation (tritonbackend.h and tritonserver.h
 * of the server's repositories describe the same functions): only what this file calls. The symbols are
 * resolved in the server process (libtritonserver), so the library links against nothing but libc.
 * Built by tritonpipeline/local/native_router.py: gcc -O2 -shared -fPIC, no other step.
 */

#define _GNU_SOURCE /* memmem */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------------- the API we call */

typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_Message TRITONSERVER_Message;
typedef struct TRITONBACKEND_Model TRITONBACKEND_Model;
typedef struct TRITONBACKEND_ModelInstance TRITONBACKEND_ModelInstance;
typedef struct TRITONBACKEND_Request TRITONBACKEND_Request;
typedef struct TRITONBACKEND_Response TRITONBACKEND_Response;
typedef struct TRITONBACKEND_Input TRITONBACKEND_Input;
typedef struct TRITONBACKEND_Output TRITONBACKEND_Output;

typedef int TRITONSERVER_DataType;   /* an enum: passed through unchanged */
typedef int TRITONSERVER_MemoryType; /* an enum: */
#define TRITONSERVER_MEMORY_CPU 0
#define TRITONSERVER_MEMORY_CPU_PINNED 1
#define TRITONSERVER_MEMORY_GPU 2
typedef int TRITONSERVER_Error_Code; /* an enum: */
#define TRITONSERVER_ERROR_INTERNAL 1
#define TRITONSERVER_ERROR_INVALID_ARG 3
#define TRITONSERVER_ERROR_UNSUPPORTED 5
#define TRITONSERVER_RESPONSE_COMPLETE_FINAL 1
#define TRITONSERVER_REQUEST_RELEASE_ALL 1

extern TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg);
extern void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error);
extern const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* error);
extern TRITONSERVER_Error* TRITONSERVER_MessageSerializeToJson(
    TRITONSERVER_Message* message, const char** base, size_t* byte_size);
extern TRITONSERVER_Error* TRITONSERVER_MessageDelete(TRITONSERVER_Message* message);

extern TRITONSERVER_Error* TRITONBACKEND_ModelConfig(
    TRITONBACKEND_Model* model, const uint32_t config_version, TRITONSERVER_Message** model_config);
extern TRITONSERVER_Error* TRITONBACKEND_ModelSetState(TRITONBACKEND_Model* model, void* state);
extern TRITONSERVER_Error* TRITONBACKEND_ModelState(TRITONBACKEND_Model* model, void** state);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceModel(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Model** model);
typedef int TRITONSERVER_InstanceGroupKind; /* an enum: */
#define TRITONSERVER_INSTANCEGROUPKIND_GPU 2
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceKind(
    TRITONBACKEND_ModelInstance* instance, TRITONSERVER_InstanceGroupKind* kind);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceDeviceId(
    TRITONBACKEND_ModelInstance* instance, int32_t* device_id);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance* instance, void* state);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance* instance, void** state);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportStatistics(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request* request, const bool success,
    const uint64_t exec_start_ns, const uint64_t compute_start_ns, const uint64_t compute_end_ns,
    const uint64_t exec_end_ns);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportBatchStatistics(
    TRITONBACKEND_ModelInstance* instance, const uint64_t batch_size, const uint64_t exec_start_ns,
    const uint64_t compute_start_ns, const uint64_t compute_end_ns, const uint64_t exec_end_ns);

extern TRITONSERVER_Error* TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request* request, uint32_t* count);
extern TRITONSERVER_Error* TRITONBACKEND_RequestInputByIndex(
    TRITONBACKEND_Request* request, const uint32_t index, TRITONBACKEND_Input** input);
extern TRITONSERVER_Error* TRITONBACKEND_InputProperties(
    TRITONBACKEND_Input* input, const char** name, TRITONSERVER_DataType* datatype, const int64_t** shape,
    uint32_t* dims_count, uint64_t* byte_size, uint32_t* buffer_count);
extern TRITONSERVER_Error* TRITONBACKEND_InputBuffer(
    TRITONBACKEND_Input* input, const uint32_t index, const void** buffer, uint64_t* buffer_byte_size,
    TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id);
extern TRITONSERVER_Error* TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request* request, uint32_t* count);
extern TRITONSERVER_Error* TRITONBACKEND_RequestOutputName(
    TRITONBACKEND_Request* request, const uint32_t index, const char** output_name);
extern TRITONSERVER_Error* TRITONBACKEND_RequestRelease(
    TRITONBACKEND_Request* request, uint32_t release_flags);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseNew(
    TRITONBACKEND_Response** response, TRITONBACKEND_Request* request);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response* response);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseOutput(
    TRITONBACKEND_Response* response, TRITONBACKEND_Output** output, const char* name,
    const TRITONSERVER_DataType datatype, const int64_t* shape, const uint32_t dims_count);
extern TRITONSERVER_Error* TRITONBACKEND_OutputBuffer(
    TRITONBACKEND_Output* output, void** buffer, const uint64_t buffer_byte_size,
    TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseSend(
    TRITONBACKEND_Response* response, const uint32_t send_flags, TRITONSERVER_Error* error);

/* ---------------------------------------------------------------------------------------- state */

typedef struct {
  int batching; /* max_batch_size > 0: the first dimension of every shape is the batch */
} ModelState;

typedef struct {
  int device;   /* a KIND_GPU instance's GPU; -1 for other kinds (their stream is on the current device) */
  void* stream; /* the instance's CUDA stream (cudaStream_t), created when it first copies a GPU tensor */
} InstanceState;

/* The CUDA runtime, when the server process has it (NVIDIA's images, the wheel): weak references, bound
   when the library is loaded into a process that has them and NULL otherwise, so that this library needs
   no CUDA to load (and no newer glibc than its memcpy's). A CPU-only server never calls them. */
extern int cudaSetDevice(int device) __attribute__((weak));
extern int cudaStreamCreateWithFlags(void** stream, unsigned int flags) __attribute__((weak));
extern int cudaStreamDestroy(void* stream) __attribute__((weak));
extern int cudaMemcpyAsync(void* dst, const void* src, size_t count, int kind, void* stream)
    __attribute__((weak));
extern int cudaStreamSynchronize(void* stream) __attribute__((weak));
#define CUDA_STREAM_NON_BLOCKING 1 /* cudaStreamNonBlocking: no implicit wait on the legacy default stream */
#define CUDA_MEMCPY_DEFAULT 4 /* cudaMemcpyDefault: the direction from the pointers (unified addressing) */

static int have_cuda(void)
{
  return cudaSetDevice != NULL && cudaStreamCreateWithFlags != NULL && cudaStreamDestroy != NULL &&
         cudaMemcpyAsync != NULL && cudaStreamSynchronize != NULL;
}

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static TRITONSERVER_Error* error(TRITONSERVER_Error_Code code, const char* what, const char* detail)
{
  char message[512];
  snprintf(message, sizeof message, "tritonpipeline native router: %s%s%s", what, detail ? ": " : "",
           detail ? detail : "");
  return TRITONSERVER_ErrorNew(code, message);
}

#define TRY(call)                                   \
  do {                                              \
    TRITONSERVER_Error* err__ = (call);             \
    if (err__ != NULL) return err__;                \
  } while (0)

/* ------------------------------------------------------------------------------------- the model */

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model)
{
  TRITONSERVER_Message* config;
  const char* json;
  size_t size;
  TRY(TRITONBACKEND_ModelConfig(model, 1, &config));
  TRITONSERVER_Error* err = TRITONSERVER_MessageSerializeToJson(config, &json, &size);
  ModelState* state = calloc(1, sizeof *state);
  if (err == NULL && state != NULL) {
    /* the one number read from the config: "max_batch_size":N (protobuf JSON, no spaces) */
    const char* key = "\"max_batch_size\":";
    const char* at = memmem(json, size, key, strlen(key));
    state->batching = at != NULL && strtol(at + strlen(key), NULL, 10) > 0;
  }
  TRITONSERVER_MessageDelete(config);
  if (err != NULL) {
    free(state);
    return err;
  }
  if (state == NULL) return error(TRITONSERVER_ERROR_INTERNAL, "out of memory", NULL);
  return TRITONBACKEND_ModelSetState(model, state);
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model)
{
  void* state;
  TRY(TRITONBACKEND_ModelState(model, &state));
  free(state);
  return NULL;
}

/* ---------------------------------------------------------------------------------- the instance */

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance)
{
  TRITONSERVER_InstanceGroupKind kind;
  int32_t device;
  TRY(TRITONBACKEND_ModelInstanceKind(instance, &kind));
  TRY(TRITONBACKEND_ModelInstanceDeviceId(instance, &device));
  InstanceState* state = calloc(1, sizeof *state);
  if (state == NULL) return error(TRITONSERVER_ERROR_INTERNAL, "out of memory", NULL);
  state->device = kind == TRITONSERVER_INSTANCEGROUPKIND_GPU ? device : -1;
  TRITONSERVER_Error* err = TRITONBACKEND_ModelInstanceSetState(instance, state);
  if (err != NULL) free(state);
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance)
{
  void* state;
  TRY(TRITONBACKEND_ModelInstanceState(instance, &state));
  InstanceState* s = state;
  if (s != NULL && s->stream != NULL) cudaStreamDestroy(s->stream); /* nothing is left on it: each request waits */
  free(s);
  return NULL;
}

/* ------------------------------------------------------------------------------------ one request */

static TRITONSERVER_Error* cuda_failed(const char* call, int status)
{
  char detail[64];
  snprintf(detail, sizeof detail, "%s returned %d", call, status);
  return error(TRITONSERVER_ERROR_INTERNAL, "copying a tensor failed", detail);
}

/* the instance's stream: created on first use, on the instance's GPU, from the thread that executes it */
static TRITONSERVER_Error* instance_stream(InstanceState* state, void** stream)
{
  if (state->stream == NULL) {
    if (!have_cuda())
      return error(TRITONSERVER_ERROR_UNSUPPORTED, "a GPU tensor, and no CUDA runtime in this server", NULL);
    if (state->device >= 0) {
      int status = cudaSetDevice(state->device);
      if (status != 0) return cuda_failed("cudaSetDevice", status);
    }
    void* created = NULL;
    int status = cudaStreamCreateWithFlags(&created, CUDA_STREAM_NON_BLOCKING);
    if (status != 0) return cuda_failed("cudaStreamCreateWithFlags", status);
    state->stream = created;
  }
  *stream = state->stream;
  return NULL;
}

/* one copy; *on_gpu is set once a copy was issued on the instance's stream (to be waited for) */
static TRITONSERVER_Error* copy(InstanceState* state, void* dst, TRITONSERVER_MemoryType dst_type,
                                const void* src, TRITONSERVER_MemoryType src_type, uint64_t size, int* on_gpu)
{
  if (size == 0) return NULL;
  if (dst_type != TRITONSERVER_MEMORY_GPU && src_type != TRITONSERVER_MEMORY_GPU) {
    memcpy(dst, src, size);
    return NULL;
  }
  void* stream = NULL;
  TRY(instance_stream(state, &stream));
  int status = cudaMemcpyAsync(dst, src, size, CUDA_MEMCPY_DEFAULT, stream);
  if (status != 0) return cuda_failed("cudaMemcpyAsync", status);
  *on_gpu = 1;
  return NULL;
}

/* the copies of route(): one copy of the input per requested output */
static TRITONSERVER_Error* copies(InstanceState* state, TRITONBACKEND_Request* request,
                                  TRITONBACKEND_Response* response, int batching, uint64_t* batch, int* on_gpu)
{
  uint32_t inputs, outputs;
  *batch = 1;
  TRY(TRITONBACKEND_RequestInputCount(request, &inputs));
  if (inputs == 0) return NULL; /* an optional pipeline input left out: no outputs either */
  if (inputs != 1) return error(TRITONSERVER_ERROR_INVALID_ARG, "a router takes exactly one input", NULL);
  TRITONBACKEND_Input* input;
  const char* name;
  TRITONSERVER_DataType datatype;
  const int64_t* shape;
  uint32_t dims, buffers;
  uint64_t size;
  TRY(TRITONBACKEND_RequestInputByIndex(request, 0, &input));
  TRY(TRITONBACKEND_InputProperties(input, &name, &datatype, &shape, &dims, &size, &buffers));
  if (batching && dims > 0) *batch = shape[0] > 0 ? (uint64_t)shape[0] : 0;
  TRY(TRITONBACKEND_RequestOutputCount(request, &outputs));
  for (uint32_t o = 0; o < outputs; o++) {
    const char* output_name;
    TRITONBACKEND_Output* output;
    TRY(TRITONBACKEND_RequestOutputName(request, o, &output_name));
    TRY(TRITONBACKEND_ResponseOutput(response, &output, output_name, datatype, shape, dims));
    /* ask for the memory of the input's first buffer: a GPU tensor stays on its GPU */
    const void* first = NULL;
    uint64_t first_size = 0;
    TRITONSERVER_MemoryType want = TRITONSERVER_MEMORY_CPU;
    int64_t want_id = 0;
    if (buffers > 0) TRY(TRITONBACKEND_InputBuffer(input, 0, &first, &first_size, &want, &want_id));
    void* out;
    TRITONSERVER_MemoryType out_type = want;
    int64_t out_id = want_id;
    TRY(TRITONBACKEND_OutputBuffer(output, &out, size, &out_type, &out_id));
    uint64_t offset = 0;
    for (uint32_t b = 0; b < buffers; b++) {
      const void* part;
      uint64_t part_size;
      TRITONSERVER_MemoryType part_type;
      int64_t part_id;
      TRY(TRITONBACKEND_InputBuffer(input, b, &part, &part_size, &part_type, &part_id));
      if (offset + part_size > size)
        return error(TRITONSERVER_ERROR_INTERNAL, "the input's buffers exceed its size", name);
      TRY(copy(state, (char*)out + offset, out_type, part, part_type, part_size, on_gpu));
      offset += part_size;
    }
  }
  return NULL;
}

/* fill `response` with one copy of the request's input per requested output; the batch size in *batch */
static TRITONSERVER_Error* route(InstanceState* state, TRITONBACKEND_Request* request,
                                 TRITONBACKEND_Response* response, int batching, uint64_t* batch)
{
  int on_gpu = 0;
  TRITONSERVER_Error* err = copies(state, request, response, batching, batch, &on_gpu);
  if (on_gpu) { /* every copy done before the response goes out (or fails) and the buffers are released */
    int status = cudaStreamSynchronize(state->stream);
    if (status != 0 && err == NULL) err = cuda_failed("cudaStreamSynchronize", status);
  }
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count)
{
  TRITONBACKEND_Model* model;
  void* state;
  TRY(TRITONBACKEND_ModelInstanceModel(instance, &model));
  TRY(TRITONBACKEND_ModelState(model, &state));
  int batching = ((ModelState*)state)->batching;
  void* instance_state;
  TRY(TRITONBACKEND_ModelInstanceState(instance, &instance_state));
  uint64_t exec_start = now_ns();
  uint64_t total_batch = 0;
  for (uint32_t r = 0; r < request_count; r++) {
    TRITONBACKEND_Request* request = requests[r];
    TRITONBACKEND_Response* response = NULL;
    uint64_t batch = 0;
    uint64_t start = now_ns();
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&response, request);
    if (err == NULL) {
      err = route(instance_state, request, response, batching, &batch);
      /* an error goes to this request's client, in place of outputs; the others are unaffected */
      TRITONSERVER_Error* sent = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
      if (sent != NULL) TRITONSERVER_ErrorDelete(sent);
    }
    uint64_t end = now_ns();
    TRITONSERVER_Error* stats =
        TRITONBACKEND_ModelInstanceReportStatistics(instance, request, err == NULL, start, start, end, end);
    if (stats != NULL) TRITONSERVER_ErrorDelete(stats);
    if (err != NULL) TRITONSERVER_ErrorDelete(err);
    else total_batch += batch;
    TRITONSERVER_Error* released = TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
    if (released != NULL) TRITONSERVER_ErrorDelete(released);
  }
  uint64_t exec_end = now_ns();
  if (total_batch > 0) {
    TRITONSERVER_Error* stats = TRITONBACKEND_ModelInstanceReportBatchStatistics(
        instance, total_batch, exec_start, exec_start, exec_end, exec_end);
    if (stats != NULL) TRITONSERVER_ErrorDelete(stats);
  }
  return NULL;
}
