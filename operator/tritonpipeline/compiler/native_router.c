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
 * The same library serves a second kind of model, the switch of a conditional pipeline: a model whose config
 * carries SWITCH_PARAMETER evaluates conditions and calls branch ensembles (the second half of this file).
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
#define SWITCH_PARAMETER "tritonpipeline.switch" /* a switch's plan (the switch, at the end of this file) */

extern TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg);
extern void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error);
extern const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* error);
extern TRITONSERVER_Error_Code TRITONSERVER_ErrorCode(TRITONSERVER_Error* error);
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


/* the in-process inference API, for the switch's calls of its branches */
typedef struct TRITONSERVER_Server TRITONSERVER_Server;
typedef struct TRITONSERVER_InferenceRequest TRITONSERVER_InferenceRequest;
typedef struct TRITONSERVER_InferenceResponse TRITONSERVER_InferenceResponse;
typedef struct TRITONSERVER_ResponseAllocator TRITONSERVER_ResponseAllocator;
typedef struct TRITONSERVER_InferenceTrace TRITONSERVER_InferenceTrace;
typedef TRITONSERVER_Error* (*TRITONSERVER_ResponseAllocatorAllocFn_t)(
    TRITONSERVER_ResponseAllocator* allocator, const char* tensor_name, size_t byte_size,
    TRITONSERVER_MemoryType memory_type, int64_t memory_type_id, void* userp, void** buffer, void** buffer_userp,
    TRITONSERVER_MemoryType* actual_memory_type, int64_t* actual_memory_type_id);
typedef TRITONSERVER_Error* (*TRITONSERVER_ResponseAllocatorReleaseFn_t)(
    TRITONSERVER_ResponseAllocator* allocator, void* buffer, void* buffer_userp, size_t byte_size,
    TRITONSERVER_MemoryType memory_type, int64_t memory_type_id);
typedef TRITONSERVER_Error* (*TRITONSERVER_ResponseAllocatorStartFn_t)(
    TRITONSERVER_ResponseAllocator* allocator, void* userp);
typedef void (*TRITONSERVER_InferenceRequestReleaseFn_t)(
    TRITONSERVER_InferenceRequest* request, const uint32_t flags, void* userp);
typedef void (*TRITONSERVER_InferenceResponseCompleteFn_t)(
    TRITONSERVER_InferenceResponse* response, const uint32_t flags, void* userp);
extern TRITONSERVER_Error* TRITONBACKEND_ModelServer(TRITONBACKEND_Model* model, TRITONSERVER_Server** server);
/* the backend's memory manager: GPU memory from the server's CUDA memory pool, no cudaMalloc per request */
typedef struct TRITONBACKEND_Backend TRITONBACKEND_Backend;
typedef struct TRITONBACKEND_MemoryManager TRITONBACKEND_MemoryManager;
extern TRITONSERVER_Error* TRITONBACKEND_ModelBackend(TRITONBACKEND_Model* model, TRITONBACKEND_Backend** backend);
extern TRITONSERVER_Error* TRITONBACKEND_BackendMemoryManager(
    TRITONBACKEND_Backend* backend, TRITONBACKEND_MemoryManager** manager);
extern TRITONSERVER_Error* TRITONBACKEND_MemoryManagerAllocate(
    TRITONBACKEND_MemoryManager* manager, void** buffer, const TRITONSERVER_MemoryType memory_type,
    const int64_t memory_type_id, const uint64_t byte_size);
extern TRITONSERVER_Error* TRITONBACKEND_MemoryManagerFree(
    TRITONBACKEND_MemoryManager* manager, void* buffer, const TRITONSERVER_MemoryType memory_type,
    const int64_t memory_type_id);
extern TRITONSERVER_Error* TRITONBACKEND_RequestInput(
    TRITONBACKEND_Request* request, const char* name, TRITONBACKEND_Input** input);
extern TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorNew(
    TRITONSERVER_ResponseAllocator** allocator, TRITONSERVER_ResponseAllocatorAllocFn_t alloc_fn,
    TRITONSERVER_ResponseAllocatorReleaseFn_t release_fn, TRITONSERVER_ResponseAllocatorStartFn_t start_fn);
extern TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorDelete(TRITONSERVER_ResponseAllocator* allocator);
/* the metrics API, for the count of requests taking each speculative branch */
typedef struct TRITONSERVER_MetricFamily TRITONSERVER_MetricFamily;
typedef struct TRITONSERVER_Metric TRITONSERVER_Metric;
typedef struct TRITONSERVER_Parameter TRITONSERVER_Parameter;
#define TRITONSERVER_METRIC_KIND_COUNTER 0
#define TRITONSERVER_PARAMETER_STRING 0
extern TRITONSERVER_Error* TRITONSERVER_MetricFamilyNew(
    TRITONSERVER_MetricFamily** family, int kind, const char* name, const char* description);
extern TRITONSERVER_Error* TRITONSERVER_MetricNew(
    TRITONSERVER_Metric** metric, TRITONSERVER_MetricFamily* family, const TRITONSERVER_Parameter** labels,
    uint64_t label_count);
extern TRITONSERVER_Error* TRITONSERVER_MetricDelete(TRITONSERVER_Metric* metric);
extern TRITONSERVER_Error* TRITONSERVER_MetricIncrement(TRITONSERVER_Metric* metric, double value);
extern TRITONSERVER_Parameter* TRITONSERVER_ParameterNew(const char* name, int type, const void* value);
extern void TRITONSERVER_ParameterDelete(TRITONSERVER_Parameter* parameter);
extern TRITONSERVER_Error* TRITONSERVER_InferenceRequestNew(
    TRITONSERVER_InferenceRequest** request, TRITONSERVER_Server* server, const char* model_name,
    const int64_t model_version);
extern TRITONSERVER_Error* TRITONSERVER_InferenceRequestDelete(TRITONSERVER_InferenceRequest* request);
extern TRITONSERVER_Error* TRITONSERVER_InferenceRequestAddInput(
    TRITONSERVER_InferenceRequest* request, const char* name, const TRITONSERVER_DataType datatype,
    const int64_t* shape, uint64_t dim_count);
extern TRITONSERVER_Error* TRITONSERVER_InferenceRequestAppendInputData(
    TRITONSERVER_InferenceRequest* request, const char* name, const void* base, size_t byte_size,
    TRITONSERVER_MemoryType memory_type, int64_t memory_type_id);
extern TRITONSERVER_Error* TRITONSERVER_InferenceRequestAddRequestedOutput(
    TRITONSERVER_InferenceRequest* request, const char* name);
extern TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetReleaseCallback(
    TRITONSERVER_InferenceRequest* request, TRITONSERVER_InferenceRequestReleaseFn_t release_fn, void* userp);
extern TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetResponseCallback(
    TRITONSERVER_InferenceRequest* request, TRITONSERVER_ResponseAllocator* allocator, void* allocator_userp,
    TRITONSERVER_InferenceResponseCompleteFn_t response_fn, void* response_userp);
extern TRITONSERVER_Error* TRITONSERVER_ServerInferAsync(
    TRITONSERVER_Server* server, TRITONSERVER_InferenceRequest* request, TRITONSERVER_InferenceTrace* trace);
extern TRITONSERVER_Error* TRITONSERVER_InferenceResponseError(TRITONSERVER_InferenceResponse* response);
extern TRITONSERVER_Error* TRITONSERVER_InferenceResponseDelete(TRITONSERVER_InferenceResponse* response);
extern TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutputCount(
    TRITONSERVER_InferenceResponse* response, uint32_t* count);
extern TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutput(
    TRITONSERVER_InferenceResponse* response, const uint32_t index, const char** name,
    TRITONSERVER_DataType* datatype, const int64_t** shape, uint64_t* dim_count, const void** base,
    size_t* byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id, void** userp);

/* ---------------------------------------------------------------------------------------- state */

typedef struct Switch Switch; /* the switch of a conditional pipeline (below); NULL: a router */

typedef struct {
  int batching; /* max_batch_size > 0: the first dimension of every shape is the batch */
  Switch* sw;
} ModelState;

typedef struct {
  int device;   /* a KIND_GPU instance's GPU; -1 for other kinds (their stream is on the current device) */
  void* stream; /* the instance's CUDA stream (cudaStream_t), created when it first copies a GPU tensor */
} InstanceState;

/* The CUDA runtime, when the server process has it (NVIDIA's images, the wheel): weak references, bound
   when the library is loaded into a process that has them and NULL otherwise, so that this library needs
   no CUDA to load (and no newer glibc than its memcpy's). A CPU-only server never calls them. */
extern int cudaSetDevice(int device) __attribute__((weak));
extern int cudaGetDevice(int* device) __attribute__((weak));
extern int cudaStreamCreateWithFlags(void** stream, unsigned int flags) __attribute__((weak));
extern int cudaStreamDestroy(void* stream) __attribute__((weak));
extern int cudaMemcpyAsync(void* dst, const void* src, size_t count, int kind, void* stream)
    __attribute__((weak));
extern int cudaStreamSynchronize(void* stream) __attribute__((weak));
extern int cudaMalloc(void** ptr, size_t size) __attribute__((weak));
extern int cudaFree(void* ptr) __attribute__((weak));
extern int cudaMemcpy(void* dst, const void* src, size_t count, int kind) __attribute__((weak));
#define CUDA_STREAM_NON_BLOCKING 1 /* cudaStreamNonBlocking: no implicit wait on the legacy default stream */
#define CUDA_MEMCPY_DEFAULT 4 /* cudaMemcpyDefault: the direction from the pointers (unified addressing) */

static int have_cuda(void)
{
  return cudaSetDevice != NULL && cudaGetDevice != NULL && cudaStreamCreateWithFlags != NULL &&
         cudaStreamDestroy != NULL && cudaMemcpyAsync != NULL && cudaStreamSynchronize != NULL;
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

/* the switch's half of this file (below) */
static TRITONSERVER_Error* switch_new(TRITONBACKEND_Model* model, const char* text, size_t size, int batching,
                                      Switch** out);
static void switch_free(Switch* sw);
static void switch_execute(TRITONBACKEND_ModelInstance* instance, ModelState* model, TRITONBACKEND_Request* request);
static uint64_t request_rows(TRITONBACKEND_Request* request, int batching);

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
    /* a switch: its plan, a string of no character JSON escapes (compiler/switch_plan.py) */
    const char* plan = "\"" SWITCH_PARAMETER "\":{\"string_value\":\"";
    at = memmem(json, size, plan, strlen(plan));
    if (at != NULL) {
      const char* text = at + strlen(plan);
      const char* end = memchr(text, '"', size - (size_t)(text - json));
      err = end == NULL ? error(TRITONSERVER_ERROR_INVALID_ARG, "the switch's plan is not terminated", NULL)
                        : switch_new(model, text, (size_t)(end - text), state->batching, &state->sw);
    }
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
  if (state != NULL) switch_free(((ModelState*)state)->sw);
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

typedef struct { /* one input of a request and its properties */
  TRITONBACKEND_Input* input;
  const char* name;
  TRITONSERVER_DataType datatype;
  const int64_t* shape;
  uint32_t dims, buffers;
  uint64_t size;
} InputInfo;

/* the request's input `name` (NULL: its first), with its properties; *found 0 where it has none */
static TRITONSERVER_Error* find_input(TRITONBACKEND_Request* request, const char* name, InputInfo* in, int* found)
{
  *found = 0;
  in->input = NULL;
  TRITONSERVER_Error* err = name != NULL ? TRITONBACKEND_RequestInput(request, name, &in->input)
                                         : TRITONBACKEND_RequestInputByIndex(request, 0, &in->input);
  if (err != NULL || in->input == NULL) { /* not there: an optional input the request left out */
    if (err != NULL) TRITONSERVER_ErrorDelete(err);
    return NULL;
  }
  TRY(TRITONBACKEND_InputProperties(in->input, &in->name, &in->datatype, &in->shape, &in->dims, &in->size,
                                    &in->buffers));
  *found = 1;
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
  InputInfo in;
  int found;
  TRY(find_input(request, NULL, &in, &found));
  if (!found) return error(TRITONSERVER_ERROR_INTERNAL, "a router's input cannot be read", NULL);
  TRITONBACKEND_Input* input = in.input;
  const char* name = in.name;
  TRITONSERVER_DataType datatype = in.datatype;
  const int64_t* shape = in.shape;
  uint32_t dims = in.dims, buffers = in.buffers;
  uint64_t size = in.size;
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
  if (((ModelState*)state)->sw != NULL) { /* each request answered when its branches have */
    uint64_t start = now_ns(), total = 0;
    for (uint32_t r = 0; r < request_count; r++) {
      total += request_rows(requests[r], ((ModelState*)state)->batching);
      switch_execute(instance, state, requests[r]);
    }
    uint64_t end = now_ns();
    TRITONSERVER_Error* stats =
        TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, total ? total : 1, start, start, end, end);
    if (stats != NULL) TRITONSERVER_ErrorDelete(stats);
    return NULL;
  }
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

/* ========================================================================================= the switch
 *
 * A conditional pipeline compiles, where this library serves it, to one ensemble: its unconditional steps,
 * then a step on this backend (the switch) that reads the tensors its branches read and their conditions'
 * tensors. For each request it evaluates each branch's condition (every batch item of the request must
 * agree), calls the ensemble of each branch taken through the server's in-process API (the request's
 * input buffers passed as they are, no copy), and answers, once they all have, with each output it serves:
 * its first source that is there (an input of the switch, or an output of a branch taken), else its
 * default, else the output is left out (the ensemble then leaves it out of its response). Triton's ensemble
 * cannot skip a step itself: a step whose input was not written is still called, without it (see
 * docs/concepts/conditions.md). The requests are answered from the branches' callbacks, so the instance
 * takes the next request while the branches run.
 *
 * Its plan is the config's SWITCH_PARAMETER: records separated by ';', tokens by ' ', every name and string
 * in hex (so JSON escapes none of it), as compiler/switch_plan.py writes it:
 *   B MODEL                     a branch: the ensemble it calls
 *   S                           the branch before it is speculative: its steps ran in the ensemble beside the
 *                               head's, for every request, so the switch calls nothing and serves its outputs
 *                               (inputs of the switch) only where the branch is taken
 *   W TENSOR OP VALUE...        its condition: OP E (equals), I (in), G (greater than), L (less than),
 *                               D (a switch's default: no comparison); VALUE i<int>, f<float>, b0/b1, s<hex>
 *   U OP VALUE...               a case of its switch before it: the branch is not taken where it holds
 *   I TENSOR / O TENSOR         a tensor it reads / writes
 *   R NAME SOURCE...            an output of the switch: its sources, first found wins
 *   F TYPE ROWS DIMS ELEMENT    the preceding output's default: TRITONSERVER_DataType, 1 where the request's
 *                               first dimension leads its shape, dims joined by ',' (- for none), one
 *                               element's bytes (a BYTES element: its 4-byte length, then its bytes)
 */

#define SWITCH_MAX_VALUES 64
#define SWITCH_MAX_CASES 64
#define SWITCH_MAX_DIMS 16
#define TYPE_BOOL 1
#define TYPE_UINT8 2
#define TYPE_UINT64 5
#define TYPE_INT8 6
#define TYPE_INT64 9
#define TYPE_FP16 10
#define TYPE_FP32 11
#define TYPE_FP64 12
#define TYPE_BYTES 13
#define TYPE_BF16 14

typedef struct { /* one value of a condition, or of a tensor */
  char kind;     /* 'i' integer, 'f' floating point, 'b' boolean, 's' string */
  int64_t i;
  double f;
  const char* s;
  size_t n;
} Value;

typedef struct {
  char op; /* E I G L D */
  int count;
  Value values[SWITCH_MAX_VALUES];
} Comparison;

typedef struct {
  char* model;
  char* tensor; /* the condition's */
  Comparison when;
  int unless_count;
  Comparison* unless;
  int speculative; /* its outputs are the switch's inputs: not called */
  TRITONSERVER_Metric* taken; /* speculative: TAKEN_METRIC{model=MODEL}, NULL where metrics are off */
  int input_count, output_count;
  char** inputs;
  char** outputs;
} Branch;

typedef struct {
  char* name;
  int source_count;
  char** sources;
  int* owners; /* per source: the speculative branch writing it (kept only where taken), or -1 */
  int has_default, rows, dim_count, datatype;
  int64_t dims[SWITCH_MAX_DIMS];
  char* element;
  size_t element_size;
} Served;

#define SWITCH_MAX_GPUS 64 /* GPUs with a copy stream of the switch's own; copies on others wait on cudaMemcpy */

struct Switch {
  TRITONSERVER_Server* server;
  TRITONSERVER_ResponseAllocator* allocator;
  TRITONBACKEND_MemoryManager* memory; /* the branches' GPU outputs, from the server's CUDA pool */
  void* streams[SWITCH_MAX_GPUS];      /* per GPU, created non-blocking at its first copy; shared by requests */
  int batching;
  int branch_count, served_count;
  Branch* branches;
  Served* served;
  char* strings; /* every decoded name and string, one block */
};

static int hexval(char c)
{
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* decode hex token [t, t+n) into *pool (NUL-terminated); NULL when it is not hex */
static char* unhex(const char* t, size_t n, char** pool, size_t* size)
{
  if (n % 2 != 0) return NULL;
  char* out = *pool;
  for (size_t k = 0; k < n; k += 2) {
    int hi = hexval(t[k]), lo = hexval(t[k + 1]);
    if (hi < 0 || lo < 0) return NULL;
    out[k / 2] = (char)(hi * 16 + lo);
  }
  out[n / 2] = '\0';
  *size = n / 2;
  *pool += n / 2 + 1;
  return out;
}

typedef struct {
  const char* tokens[SWITCH_MAX_VALUES + 8];
  size_t lengths[SWITCH_MAX_VALUES + 8];
  int count;
} Record;

static int split_record(const char* text, size_t size, Record* r)
{
  r->count = 0;
  size_t k = 0;
  while (k < size) {
    while (k < size && text[k] == ' ') k++;
    if (k >= size) break;
    size_t start = k;
    while (k < size && text[k] != ' ') k++;
    if (r->count == (int)(sizeof r->tokens / sizeof r->tokens[0])) return -1;
    r->tokens[r->count] = text + start;
    r->lengths[r->count++] = k - start;
  }
  return 0;
}

static int parse_value(const char* t, size_t n, char** pool, Value* v)
{
  char buf[64];
  if (n < 1) return -1;
  v->kind = t[0];
  if (v->kind == 's') return (v->s = unhex(t + 1, n - 1, pool, &v->n)) == NULL ? -1 : 0;
  if (n - 1 >= sizeof buf) return -1;
  memcpy(buf, t + 1, n - 1);
  buf[n - 1] = '\0';
  if (v->kind == 'i' || v->kind == 'b') v->i = strtoll(buf, NULL, 10);
  else if (v->kind == 'f') v->f = strtod(buf, NULL);
  else return -1;
  return 0;
}

static int parse_comparison(const Record* r, int first, char** pool, Comparison* c)
{
  if (r->count <= first || r->lengths[first] != 1) return -1;
  c->op = r->tokens[first][0];
  c->count = r->count - first - 1;
  if (c->count > SWITCH_MAX_VALUES) return -1;
  for (int k = 0; k < c->count; k++)
    if (parse_value(r->tokens[first + 1 + k], r->lengths[first + 1 + k], pool, &c->values[k]) != 0) return -1;
  return 0;
}

static void switch_free(Switch* sw)
{
  if (sw == NULL) return;
  for (int b = 0; b < sw->branch_count; b++) {
    if (sw->branches[b].taken != NULL) {
      TRITONSERVER_Error* err = TRITONSERVER_MetricDelete(sw->branches[b].taken);
      if (err != NULL) TRITONSERVER_ErrorDelete(err);
    }
    free(sw->branches[b].unless);
    free(sw->branches[b].inputs);
    free(sw->branches[b].outputs);
  }
  for (int o = 0; o < sw->served_count; o++) {
    free(sw->served[o].sources);
    free(sw->served[o].owners);
  }
  free(sw->branches);
  free(sw->served);
  free(sw->strings);
  if (sw->allocator != NULL) TRITONSERVER_ResponseAllocatorDelete(sw->allocator);
  for (int d = 0; d < SWITCH_MAX_GPUS; d++)
    if (sw->streams[d] != NULL) cudaStreamDestroy(sw->streams[d]); /* every copy on it was waited for */
  free(sw);
}

/* the branches' outputs: in the memory their producer asks for. GPU memory comes from the server's CUDA pool
   (the backend's memory manager): cudaMalloc and cudaFree per request would wait for the whole device, every
   other model's work on it included. Where the pool is spent, cudaMalloc; else the host. *buffer_userp says
   which, for the release: the memory manager, CUDA_MALLOCED, or NULL (malloc). */
static char cuda_malloced;
#define CUDA_MALLOCED ((void*)&cuda_malloced)

static TRITONSERVER_Error* switch_alloc(TRITONSERVER_ResponseAllocator* allocator, const char* name,
                                        size_t size, TRITONSERVER_MemoryType type, int64_t type_id,
                                        void* userp, void** buffer, void** buffer_userp,
                                        TRITONSERVER_MemoryType* actual, int64_t* actual_id)
{
  (void)allocator;
  const Switch* sw = userp;
  *buffer = NULL;
  *buffer_userp = NULL;
  *actual = TRITONSERVER_MEMORY_CPU;
  *actual_id = 0;
  if (size == 0) return NULL;
  if (type == TRITONSERVER_MEMORY_GPU && sw != NULL && sw->memory != NULL) {
    TRITONSERVER_Error* err = TRITONBACKEND_MemoryManagerAllocate(sw->memory, buffer, type, type_id, size);
    if (err == NULL) {
      *buffer_userp = sw->memory;
      *actual = TRITONSERVER_MEMORY_GPU;
      *actual_id = type_id;
      return NULL;
    }
    TRITONSERVER_ErrorDelete(err);
    *buffer = NULL;
  }
  if (type == TRITONSERVER_MEMORY_GPU && cudaMalloc != NULL && cudaSetDevice != NULL &&
      cudaSetDevice((int)type_id) == 0 && cudaMalloc(buffer, size) == 0) {
    *buffer_userp = CUDA_MALLOCED;
    *actual = TRITONSERVER_MEMORY_GPU;
    *actual_id = type_id;
    return NULL;
  }
  *buffer = malloc(size);
  if (*buffer == NULL) return error(TRITONSERVER_ERROR_INTERNAL, "out of memory", name);
  return NULL;
}

static TRITONSERVER_Error* switch_release(TRITONSERVER_ResponseAllocator* allocator, void* buffer,
                                          void* buffer_userp, size_t size, TRITONSERVER_MemoryType type,
                                          int64_t type_id)
{
  (void)allocator, (void)size;
  if (buffer_userp == CUDA_MALLOCED) cudaFree(buffer);
  else if (buffer_userp != NULL) return TRITONBACKEND_MemoryManagerFree(buffer_userp, buffer, type, type_id);
  else free(buffer);
  return NULL;
}

#define BAD_PLAN(what) \
  do {                 \
    err = error(TRITONSERVER_ERROR_INVALID_ARG, "the switch's plan", what); \
    goto fail;         \
  } while (0)

/* A speculative branch's ensemble is never called, so Triton's own counters of it stay at 0: the switch counts
   the rows of the requests taking it in a counter of its own, labelled as Triton labels a model's counters
   (render/triton_metrics.py adds it to the branch's nv_inference_count). The family is made once and kept for
   the process: a family deleted while another switch has counters in it would drop them from the page. */
#define TAKEN_METRIC "tritonpipeline_branch_taken"
#define TAKEN_HELP "Rows of the requests that took a speculative branch (its ensemble is never called)"
static TRITONSERVER_MetricFamily* taken_family;

static TRITONSERVER_Metric* taken_metric(const char* model)
{
  TRITONSERVER_MetricFamily* family = __atomic_load_n(&taken_family, __ATOMIC_ACQUIRE);
  if (family == NULL) {
    TRITONSERVER_Error* err = TRITONSERVER_MetricFamilyNew(&family, TRITONSERVER_METRIC_KIND_COUNTER, TAKEN_METRIC, TAKEN_HELP);
    if (err != NULL) { /* metrics off (--allow-metrics=false): no count */
      TRITONSERVER_ErrorDelete(err);
      return NULL;
    }
    TRITONSERVER_MetricFamily* none = NULL; /* another switch made it first: the same family (Triton merges) */
    if (!__atomic_compare_exchange_n(&taken_family, &none, family, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      family = none;
  }
  const TRITONSERVER_Parameter* labels[1] = {TRITONSERVER_ParameterNew("model", TRITONSERVER_PARAMETER_STRING, model)};
  TRITONSERVER_Metric* metric = NULL;
  TRITONSERVER_Error* err = labels[0] == NULL ? NULL : TRITONSERVER_MetricNew(&metric, family, labels, 1);
  if (labels[0] != NULL) TRITONSERVER_ParameterDelete((TRITONSERVER_Parameter*)labels[0]);
  if (err != NULL) TRITONSERVER_ErrorDelete(err);
  return err == NULL ? metric : NULL;
}

static TRITONSERVER_Error* switch_new(TRITONBACKEND_Model* model, const char* text, size_t size, int batching,
                                      Switch** out)
{
  TRITONSERVER_Error* err = NULL;
  Switch* sw = calloc(1, sizeof *sw);
  if (sw == NULL) return error(TRITONSERVER_ERROR_INTERNAL, "out of memory", NULL);
  sw->batching = batching;
  int records = 1;
  for (size_t k = 0; k < size; k++) records += text[k] == ';';
  sw->strings = malloc(size + (size_t)records * 2 + 1); /* decoded strings: never longer than their hex */
  sw->branches = calloc((size_t)records, sizeof *sw->branches);
  sw->served = calloc((size_t)records, sizeof *sw->served);
  if (sw->strings == NULL || sw->branches == NULL || sw->served == NULL) BAD_PLAN("out of memory");
  char* pool = sw->strings;
  Branch* b = NULL;
  Served* o = NULL;
  Record r;
  size_t start = 0;
  while (start <= size) {
    const char* end = memchr(text + start, ';', size - start);
    size_t n = end == NULL ? size - start : (size_t)(end - (text + start));
    if (split_record(text + start, n, &r) != 0) BAD_PLAN("a record has too many tokens");
    start += n + 1;
    if (r.count == 0) continue;
    size_t unused;
    char kind = r.lengths[0] == 1 ? r.tokens[0][0] : '?';
    if (kind == 'B' && r.count == 2) {
      b = &sw->branches[sw->branch_count++];
      b->inputs = calloc((size_t)records, sizeof(char*));
      b->outputs = calloc((size_t)records, sizeof(char*));
      b->unless = calloc(SWITCH_MAX_CASES, sizeof(Comparison));
      if (b->inputs == NULL || b->outputs == NULL || b->unless == NULL) BAD_PLAN("out of memory");
      if ((b->model = unhex(r.tokens[1], r.lengths[1], &pool, &unused)) == NULL) BAD_PLAN("a model name");
    } else if (kind == 'S' && b != NULL && r.count == 1) {
      b->speculative = 1;
    } else if (kind == 'W' && b != NULL && r.count >= 3) {
      if ((b->tensor = unhex(r.tokens[1], r.lengths[1], &pool, &unused)) == NULL) BAD_PLAN("a tensor name");
      if (parse_comparison(&r, 2, &pool, &b->when) != 0) BAD_PLAN("a condition");
    } else if (kind == 'U' && b != NULL && r.count >= 2 && b->unless_count < SWITCH_MAX_CASES) {
      if (parse_comparison(&r, 1, &pool, &b->unless[b->unless_count++]) != 0) BAD_PLAN("a case");
    } else if ((kind == 'I' || kind == 'O') && b != NULL && r.count == 2) {
      char* name = unhex(r.tokens[1], r.lengths[1], &pool, &unused);
      if (name == NULL) BAD_PLAN("a tensor name");
      if (kind == 'I') b->inputs[b->input_count++] = name;
      else b->outputs[b->output_count++] = name;
    } else if (kind == 'R' && r.count >= 2) {
      o = &sw->served[sw->served_count++];
      if ((o->name = unhex(r.tokens[1], r.lengths[1], &pool, &unused)) == NULL) BAD_PLAN("an output name");
      o->sources = calloc((size_t)r.count, sizeof(char*));
      o->owners = calloc((size_t)r.count, sizeof(int));
      if (o->sources == NULL || o->owners == NULL) BAD_PLAN("out of memory");
      for (int k = 2; k < r.count; k++)
        if ((o->sources[o->source_count++] = unhex(r.tokens[k], r.lengths[k], &pool, &unused)) == NULL)
          BAD_PLAN("a source");
    } else if (kind == 'F' && o != NULL && r.count == 5) {
      o->has_default = 1;
      o->datatype = (int)strtol(r.tokens[1], NULL, 10);
      o->rows = r.tokens[2][0] == '1';
      const char* d = r.tokens[3];
      const char* d_end = d + r.lengths[3];
      while (d < d_end && *d != '-') {
        if (o->dim_count == SWITCH_MAX_DIMS) BAD_PLAN("a default's dims");
        char* next;
        o->dims[o->dim_count++] = strtoll(d, &next, 10);
        d = next < d_end && *next == ',' ? next + 1 : next;
        if (next == d && d < d_end && *d != ',') break;
      }
      if ((o->element = unhex(r.tokens[4], r.lengths[4], &pool, &o->element_size)) == NULL)
        BAD_PLAN("a default's element");
    } else {
      BAD_PLAN("an unknown or incomplete record");
    }
  }
  for (int k = 0; k < sw->branch_count; k++) {
    if (sw->branches[k].tensor == NULL) BAD_PLAN("a branch without a condition");
    if (sw->branches[k].speculative) sw->branches[k].taken = taken_metric(sw->branches[k].model);
  }
  for (int k = 0; k < sw->served_count; k++) {
    Served* served = &sw->served[k];
    for (int s = 0; s < served->source_count; s++) {
      served->owners[s] = -1;
      for (int n = 0; n < sw->branch_count && served->owners[s] < 0; n++)
        for (int t = 0; t < sw->branches[n].output_count; t++)
          if (sw->branches[n].speculative && strcmp(sw->branches[n].outputs[t], served->sources[s]) == 0)
            served->owners[s] = n;
    }
  }
  if ((err = TRITONBACKEND_ModelServer(model, &sw->server)) != NULL) goto fail;
  TRITONBACKEND_Backend* backend;
  if ((err = TRITONBACKEND_ModelBackend(model, &backend)) != NULL) goto fail;
  if ((err = TRITONBACKEND_BackendMemoryManager(backend, &sw->memory)) != NULL) goto fail;
  if ((err = TRITONSERVER_ResponseAllocatorNew(&sw->allocator, switch_alloc, switch_release, NULL)) != NULL)
    goto fail;
  *out = sw;
  return NULL;
fail:
  switch_free(sw);
  return err;
}

/* --------------------------------------------------------------------------------- its conditions */

static int is_bool(const Value* v) { return v->kind == 'b'; }

static int numeric(const Value* v) { return v->kind == 'i' || v->kind == 'f' || v->kind == 'b'; }

static double as_double(const Value* v) { return v->kind == 'f' ? v->f : (double)v->i; }

/* -1, 0, 1 as a <, ==, > b (both numeric) */
static int compare(const Value* a, const Value* b)
{
  if (a->kind != 'f' && b->kind != 'f') return a->i < b->i ? -1 : a->i > b->i;
  double x = as_double(a), y = as_double(b);
  return x < y ? -1 : x > y;
}

static int equal(const Value* value, const Value* wanted)
{
  if (value->kind == 's' || wanted->kind == 's')
    return value->kind == wanted->kind && value->n == wanted->n && memcmp(value->s, wanted->s, value->n) == 0;
  return is_bool(value) == is_bool(wanted) && compare(value, wanted) == 0;
}

static int holds(const Comparison* c, const Value* value)
{
  switch (c->op) {
    case 'D':
      return 1;
    case 'E':
    case 'I':
      for (int k = 0; k < c->count; k++)
        if (equal(value, &c->values[k])) return 1;
      return 0;
    case 'G':
      return numeric(value) && c->count == 1 && compare(value, &c->values[0]) > 0;
    case 'L':
      return numeric(value) && c->count == 1 && compare(value, &c->values[0]) < 0;
    default:
      return 0;
  }
}

static int takes(const Branch* b, const Value* value)
{
  for (int k = 0; k < b->unless_count; k++)
    if (holds(&b->unless[k], value)) return 0;
  return holds(&b->when, value);
}

static float half_to_float(uint16_t h)
{
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) { /* zero or subnormal */
    float f = (float)mant / 1024.0f / 16384.0f;
    return sign ? -f : f;
  }
  if (exp == 31) bits = sign | 0x7f800000u | (mant << 13);
  else bits = sign | ((exp + 112) << 23) | (mant << 13);
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* element k of a host tensor of `datatype`; *at walks a BYTES tensor. -1: not a type a condition reads */
static int element(int datatype, const char* data, size_t size, size_t k, size_t* at, Value* v)
{
  v->kind = 'i';
  switch (datatype) {
    case TYPE_BOOL:
      v->kind = 'b';
      v->i = data[k] != 0;
      return 0;
    case TYPE_UINT8: { uint8_t x; memcpy(&x, data + k, 1); v->i = x; return 0; }
    case TYPE_UINT8 + 1: { uint16_t x; memcpy(&x, data + 2 * k, 2); v->i = x; return 0; }
    case TYPE_UINT8 + 2: { uint32_t x; memcpy(&x, data + 4 * k, 4); v->i = x; return 0; }
    case TYPE_UINT64: { /* past INT64_MAX: as a double, above every value a spec can hold (2^53) */
      uint64_t x;
      memcpy(&x, data + 8 * k, 8);
      if (x > (uint64_t)INT64_MAX) { v->kind = 'f'; v->f = (double)x; }
      else v->i = (int64_t)x;
      return 0;
    }
    case TYPE_INT8: { int8_t x; memcpy(&x, data + k, 1); v->i = x; return 0; }
    case TYPE_INT8 + 1: { int16_t x; memcpy(&x, data + 2 * k, 2); v->i = x; return 0; }
    case TYPE_INT8 + 2: { int32_t x; memcpy(&x, data + 4 * k, 4); v->i = x; return 0; }
    case TYPE_INT64: { int64_t x; memcpy(&x, data + 8 * k, 8); v->i = x; return 0; }
    case TYPE_FP16: { uint16_t x; memcpy(&x, data + 2 * k, 2); v->kind = 'f'; v->f = half_to_float(x); return 0; }
    case TYPE_BF16: {
      uint16_t x;
      memcpy(&x, data + 2 * k, 2);
      uint32_t bits = (uint32_t)x << 16;
      float f;
      memcpy(&f, &bits, sizeof f);
      v->kind = 'f';
      v->f = f;
      return 0;
    }
    case TYPE_FP32: { float x; memcpy(&x, data + 4 * k, 4); v->kind = 'f'; v->f = x; return 0; }
    case TYPE_FP64: { double x; memcpy(&x, data + 8 * k, 8); v->kind = 'f'; v->f = x; return 0; }
    case TYPE_BYTES: {
      uint32_t n;
      if (*at + 4 > size) return -1;
      memcpy(&n, data + *at, 4);
      if (*at + 4 + n > size) return -1;
      v->kind = 's';
      v->s = data + *at + 4;
      v->n = n;
      *at += 4 + (size_t)n;
      return 0;
    }
    default:
      return -1;
  }
}

static size_t element_size(int datatype)
{
  switch (datatype) {
    case TYPE_BOOL: case TYPE_UINT8: case TYPE_INT8: return 1;
    case TYPE_UINT8 + 1: case TYPE_INT8 + 1: case TYPE_FP16: case TYPE_BF16: return 2;
    case TYPE_UINT8 + 2: case TYPE_INT8 + 2: case TYPE_FP32: return 4;
    case TYPE_UINT64: case TYPE_INT64: case TYPE_FP64: return 8;
    default: return 0; /* BYTES: each its own */
  }
}

/* a request's batch size: the first dimension of its first input where the model batches, else 1 */
static uint64_t request_rows(TRITONBACKEND_Request* request, int batching)
{
  InputInfo in;
  int found = 0;
  if (!batching) return 1;
  TRITONSERVER_Error* err = find_input(request, NULL, &in, &found);
  if (err != NULL) TRITONSERVER_ErrorDelete(err);
  return found && in.dims > 0 && in.shape[0] > 0 ? (uint64_t)in.shape[0] : 1;
}

static TRITONSERVER_Error* copy_sync(Switch* sw, void* dst, TRITONSERVER_MemoryType dst_type, int64_t dst_id,
                                     const void* src, TRITONSERVER_MemoryType src_type, int64_t src_id, size_t size);

/* one input's bytes, on the host and contiguous: *owned is set when they were gathered (free it); a GPU
   tensor's (a condition computed on the GPU) come over on the switch's stream */
static TRITONSERVER_Error* host_bytes(Switch* sw, TRITONBACKEND_Input* input, uint64_t size, uint32_t buffers,
                                      const char** data, char** owned)
{
  *owned = NULL;
  const void* part;
  uint64_t part_size;
  TRITONSERVER_MemoryType type;
  int64_t type_id;
  if (buffers == 1) {
    TRY(TRITONBACKEND_InputBuffer(input, 0, &part, &part_size, &type, &type_id));
    if (type != TRITONSERVER_MEMORY_GPU) {
      *data = part;
      return NULL;
    }
  }
  char* copy_ = malloc(size ? size : 1);
  if (copy_ == NULL) return error(TRITONSERVER_ERROR_INTERNAL, "out of memory", NULL);
  *owned = copy_;
  uint64_t offset = 0;
  for (uint32_t k = 0; k < buffers; k++) {
    TRY(TRITONBACKEND_InputBuffer(input, k, &part, &part_size, &type, &type_id));
    if (offset + part_size > size) return error(TRITONSERVER_ERROR_INTERNAL, "an input's buffers exceed its size", NULL);
    TRY(copy_sync(sw, copy_ + offset, TRITONSERVER_MEMORY_CPU, 0, part, type, type_id, part_size));
    offset += part_size;
  }
  *data = copy_;
  return NULL;
}

/* whether the request takes branch b: every value of its condition's tensor must agree */
static TRITONSERVER_Error* taken(Switch* sw, TRITONBACKEND_Request* request, const Branch* b, int* result)
{
  InputInfo in;
  int found_input;
  TRY(find_input(request, b->tensor, &in, &found_input));
  if (!found_input) { /* left out (an optional input): no comparison holds, only a switch's default */
    *result = b->when.op == 'D';
    return NULL;
  }
  const int64_t* shape = in.shape;
  uint32_t dims = in.dims;
  uint64_t size = in.size;
  TRITONSERVER_DataType datatype = in.datatype;
  const char* data = NULL;
  char* owned = NULL;
  TRITONSERVER_Error* gathered = host_bytes(sw, in.input, size, in.buffers, &data, &owned);
  if (gathered != NULL) {
    free(owned);
    return gathered;
  }
  uint64_t count = 1;
  for (uint32_t d = 0; d < dims; d++) count *= shape[d] > 0 ? (uint64_t)shape[d] : 0;
  TRITONSERVER_Error* err = NULL;
  int found = -1;
  size_t at = 0;
  size_t width = element_size(datatype);
  if (datatype != TYPE_BYTES && (width == 0 || count * width > size))
    err = error(TRITONSERVER_ERROR_INVALID_ARG, "a condition's tensor of a type no condition reads", b->tensor);
  for (uint64_t k = 0; err == NULL && k < count; k++) {
    Value v;
    if (element(datatype, data, size, k, &at, &v) != 0) {
      err = error(TRITONSERVER_ERROR_INVALID_ARG, "a condition's tensor is malformed", b->tensor);
      break;
    }
    int t = takes(b, &v);
    if (found >= 0 && t != found)
      err = error(TRITONSERVER_ERROR_INVALID_ARG, "the batch items of one request disagree on the condition on",
                  b->tensor);
    found = t;
  }
  free(owned);
  *result = found == 1;
  return err;
}

/* ---------------------------------------------------------------------------- one request's calls */

typedef struct {
  TRITONBACKEND_ModelInstance* instance;
  Switch* sw;
  TRITONBACKEND_Request* request;
  uint64_t start_ns;
  int pending; /* callbacks still to come, and the execute's own hold (atomic) */
  TRITONSERVER_Error* err; /* the first error: answered instead of outputs */
  const char* failed_model;
  TRITONSERVER_InferenceResponse** responses; /* one per branch: NULL where not taken (or none came) */
  int* take; /* per branch: whether the request takes it */
} Call;

static void call_failed(Call* c, TRITONSERVER_Error* err, const char* model)
{
  TRITONSERVER_Error* none = NULL;
  if (!__atomic_compare_exchange_n(&c->err, &none, err, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    TRITONSERVER_ErrorDelete(err);
  else
    c->failed_model = model;
}

/* the switch's copy stream on GPU `device`, created non-blocking on first use (NULL: none, copy with cudaMemcpy).
   The callbacks of many requests copy at once: the first stream stored wins, another is destroyed. */
static void* switch_stream(Switch* sw, int64_t device)
{
  if (!have_cuda() || device < 0 || device >= SWITCH_MAX_GPUS) return NULL;
  void* stream = __atomic_load_n(&sw->streams[device], __ATOMIC_ACQUIRE);
  if (stream != NULL) return stream;
  int current;
  if (cudaGetDevice(&current) != 0) return NULL;
  void* created = NULL;
  int made = cudaSetDevice((int)device) == 0 && cudaStreamCreateWithFlags(&created, CUDA_STREAM_NON_BLOCKING) == 0;
  cudaSetDevice(current); /* the calling thread is the server's: its device stays as it was */
  if (!made) return NULL;
  void* none = NULL;
  if (__atomic_compare_exchange_n(&sw->streams[device], &none, created, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return created;
  cudaStreamDestroy(created);
  return none;
}

/* copy [src, src+size) of `src_type` (on GPU src_id) into a host or GPU buffer (on GPU dst_id), done on
   return: on the switch's own stream where it has one, so that the copy waits for no other model's work on
   the device (cudaMemcpy runs on the legacy default stream, which waits for every blocking stream) */
static TRITONSERVER_Error* copy_sync(Switch* sw, void* dst, TRITONSERVER_MemoryType dst_type, int64_t dst_id,
                                     const void* src, TRITONSERVER_MemoryType src_type, int64_t src_id, size_t size)
{
  if (size == 0) return NULL;
  if (dst_type != TRITONSERVER_MEMORY_GPU && src_type != TRITONSERVER_MEMORY_GPU) {
    memcpy(dst, src, size);
    return NULL;
  }
  void* stream = switch_stream(sw, src_type == TRITONSERVER_MEMORY_GPU ? src_id : dst_id);
  if (stream != NULL) {
    int status = cudaMemcpyAsync(dst, src, size, CUDA_MEMCPY_DEFAULT, stream);
    if (status != 0) return cuda_failed("cudaMemcpyAsync", status);
    status = cudaStreamSynchronize(stream);
    return status == 0 ? NULL : cuda_failed("cudaStreamSynchronize", status);
  }
  if (cudaMemcpy == NULL) return error(TRITONSERVER_ERROR_UNSUPPORTED, "a GPU tensor, and no CUDA runtime", NULL);
  int status = cudaMemcpy(dst, src, size, CUDA_MEMCPY_DEFAULT);
  return status == 0 ? NULL : cuda_failed("cudaMemcpy", status);
}

/* output o from the switch's own input `source`, when the request has it; *done set when it did */
static TRITONSERVER_Error* serve_input(Call* c, TRITONBACKEND_Response* response, const Served* o,
                                       const char* source, int* done)
{
  InputInfo in;
  int found;
  TRY(find_input(c->request, source, &in, &found));
  if (!found) return NULL;
  TRITONBACKEND_Output* output;
  TRY(TRITONBACKEND_ResponseOutput(response, &output, o->name, in.datatype, in.shape, in.dims));
  const void* part = NULL;
  uint64_t part_size = 0;
  TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
  int64_t type_id = 0;
  if (in.buffers > 0) TRY(TRITONBACKEND_InputBuffer(in.input, 0, &part, &part_size, &type, &type_id));
  void* out;
  TRY(TRITONBACKEND_OutputBuffer(output, &out, in.size, &type, &type_id));
  uint64_t offset = 0;
  for (uint32_t k = 0; k < in.buffers; k++) {
    TRITONSERVER_MemoryType src_type;
    int64_t src_id;
    TRY(TRITONBACKEND_InputBuffer(in.input, k, &part, &part_size, &src_type, &src_id));
    if (offset + part_size > in.size)
      return error(TRITONSERVER_ERROR_INTERNAL, "an input's buffers exceed its size", in.name);
    TRY(copy_sync(c->sw, (char*)out + offset, type, type_id, part, src_type, src_id, part_size));
    offset += part_size;
  }
  *done = 1;
  return NULL;
}

/* output o from a branch's response, when one wrote `source` */
static TRITONSERVER_Error* serve_branch(Call* c, TRITONBACKEND_Response* response, const Served* o,
                                        const char* source, int* done)
{
  for (int b = 0; b < c->sw->branch_count; b++) {
    TRITONSERVER_InferenceResponse* r = c->responses[b];
    if (r == NULL) continue;
    uint32_t count;
    TRY(TRITONSERVER_InferenceResponseOutputCount(r, &count));
    for (uint32_t k = 0; k < count; k++) {
      const char* name;
      TRITONSERVER_DataType datatype;
      const int64_t* shape;
      uint64_t dims;
      const void* base;
      size_t size;
      TRITONSERVER_MemoryType type;
      int64_t type_id;
      void* userp;
      TRY(TRITONSERVER_InferenceResponseOutput(r, k, &name, &datatype, &shape, &dims, &base, &size, &type,
                                               &type_id, &userp));
      if (strcmp(name, source) != 0) continue;
      TRITONBACKEND_Output* output;
      TRY(TRITONBACKEND_ResponseOutput(response, &output, o->name, datatype, shape, (uint32_t)dims));
      void* out;
      TRITONSERVER_MemoryType out_type = type;
      int64_t out_id = type_id;
      TRY(TRITONBACKEND_OutputBuffer(output, &out, size, &out_type, &out_id));
      TRY(copy_sync(c->sw, out, out_type, out_id, base, type, type_id, size));
      *done = 1;
      return NULL;
    }
  }
  return NULL;
}

/* output o's default: its element repeated over its shape, on the host */
static TRITONSERVER_Error* serve_default(Call* c, TRITONBACKEND_Response* response, const Served* o)
{
  int64_t shape[SWITCH_MAX_DIMS + 1];
  uint32_t dims = 0;
  if (o->rows) shape[dims++] = (int64_t)request_rows(c->request, 1);
  uint64_t count = 1;
  for (int k = 0; k < o->dim_count; k++) shape[dims++] = o->dims[k];
  for (uint32_t k = 0; k < dims; k++) count *= shape[k] > 0 ? (uint64_t)shape[k] : 0;
  TRITONBACKEND_Output* output;
  TRY(TRITONBACKEND_ResponseOutput(response, &output, o->name, o->datatype, shape, dims));
  void* out;
  TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
  int64_t type_id = 0;
  uint64_t size = count * o->element_size;
  TRY(TRITONBACKEND_OutputBuffer(output, &out, size, &type, &type_id));
  if (type == TRITONSERVER_MEMORY_GPU) {
    char* host = malloc(size ? size : 1);
    if (host == NULL) return error(TRITONSERVER_ERROR_INTERNAL, "out of memory", NULL);
    for (uint64_t k = 0; k < count; k++) memcpy(host + k * o->element_size, o->element, o->element_size);
    TRITONSERVER_Error* err = copy_sync(c->sw, out, type, type_id, host, TRITONSERVER_MEMORY_CPU, 0, size);
    free(host);
    return err;
  }
  for (uint64_t k = 0; k < count; k++) memcpy((char*)out + k * o->element_size, o->element, o->element_size);
  return NULL;
}

static TRITONSERVER_Error* fill(Call* c, TRITONBACKEND_Response* response)
{
  for (int b = 0; b < c->sw->branch_count; b++) {
    if (c->responses[b] == NULL) continue;
    TRITONSERVER_Error* failed = TRITONSERVER_InferenceResponseError(c->responses[b]);
    if (failed != NULL) {
      /* the branch's code kept: a request its model refuses (INVALID_ARG) is the client's fault */
      TRITONSERVER_Error* err = error(TRITONSERVER_ErrorCode(failed), c->sw->branches[b].model,
                                      TRITONSERVER_ErrorMessage(failed));
      TRITONSERVER_ErrorDelete(failed);
      return err;
    }
  }
  for (int k = 0; k < c->sw->served_count; k++) {
    const Served* o = &c->sw->served[k];
    int done = 0;
    for (int s = 0; s < o->source_count && !done; s++) {
      if (o->owners[s] >= 0 && !c->take[o->owners[s]]) continue; /* a speculative branch not taken */
      TRY(serve_input(c, response, o, o->sources[s], &done));
      if (!done) TRY(serve_branch(c, response, o, o->sources[s], &done));
    }
    if (!done && o->has_default) TRY(serve_default(c, response, o));
  }
  return NULL;
}

/* every branch has answered (or none was called): answer the request, release it */
static void finish(Call* c)
{
  TRITONBACKEND_Response* response = NULL;
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&response, c->request);
  if (err == NULL) {
    err = c->err;
    c->err = NULL;
    if (err != NULL && c->failed_model != NULL) {
      TRITONSERVER_Error* named = error(TRITONSERVER_ErrorCode(err), c->failed_model, TRITONSERVER_ErrorMessage(err));
      TRITONSERVER_ErrorDelete(err);
      err = named;
    }
    if (err == NULL) err = fill(c, response);
    if (err == NULL) /* counted as Triton counts a branch ensemble's inferences: the rows of its successes */
      for (int b = 0; b < c->sw->branch_count; b++)
        if (c->take[b] && c->sw->branches[b].taken != NULL) {
          TRITONSERVER_Error* counted =
              TRITONSERVER_MetricIncrement(c->sw->branches[b].taken, (double)request_rows(c->request, c->sw->batching));
          if (counted != NULL) TRITONSERVER_ErrorDelete(counted);
        }
    TRITONSERVER_Error* sent = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
    if (sent != NULL) TRITONSERVER_ErrorDelete(sent);
  }
  uint64_t end = now_ns();
  TRITONSERVER_Error* stats =
      TRITONBACKEND_ModelInstanceReportStatistics(c->instance, c->request, err == NULL, c->start_ns, c->start_ns, end, end);
  if (stats != NULL) TRITONSERVER_ErrorDelete(stats);
  if (err != NULL) TRITONSERVER_ErrorDelete(err);
  if (c->err != NULL) TRITONSERVER_ErrorDelete(c->err);
  TRITONSERVER_Error* released = TRITONBACKEND_RequestRelease(c->request, TRITONSERVER_REQUEST_RELEASE_ALL);
  if (released != NULL) TRITONSERVER_ErrorDelete(released);
  for (int b = 0; b < c->sw->branch_count; b++)
    if (c->responses[b] != NULL) TRITONSERVER_InferenceResponseDelete(c->responses[b]);
  free(c->responses);
  free(c->take);
  free(c);
}

static void done_one(Call* c)
{
  if (__atomic_sub_fetch(&c->pending, 1, __ATOMIC_ACQ_REL) == 0) finish(c);
}

typedef struct { /* what a branch's callbacks know */
  Call* call;
  int branch;
} Pending;

static void branch_released(TRITONSERVER_InferenceRequest* request, const uint32_t flags, void* userp)
{
  if ((flags & TRITONSERVER_REQUEST_RELEASE_ALL) == 0) return;
  Pending* p = userp;
  Call* c = p->call;
  TRITONSERVER_InferenceRequestDelete(request);
  free(p);
  done_one(c);
}

static void branch_answered(TRITONSERVER_InferenceResponse* response, const uint32_t flags, void* userp)
{
  Pending* p = userp;
  Call* c = p->call;
  if (response != NULL) {
    if (c->responses[p->branch] != NULL) TRITONSERVER_InferenceResponseDelete(c->responses[p->branch]);
    c->responses[p->branch] = response;
  }
  if (flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) done_one(c);
}

/* the request of branch b: the switch's inputs it reads (those the request has), its outputs */
static TRITONSERVER_Error* branch_request(Call* c, int b, TRITONSERVER_InferenceRequest* irequest)
{
  const Branch* branch = &c->sw->branches[b];
  for (int k = 0; k < branch->input_count; k++) {
    InputInfo in;
    int found;
    TRY(find_input(c->request, branch->inputs[k], &in, &found));
    if (!found) continue; /* an optional pipeline input the request left out */
    TRY(TRITONSERVER_InferenceRequestAddInput(irequest, branch->inputs[k], in.datatype, in.shape, in.dims));
    for (uint32_t n = 0; n < in.buffers; n++) {
      const void* part;
      uint64_t part_size;
      TRITONSERVER_MemoryType type;
      int64_t type_id;
      TRY(TRITONBACKEND_InputBuffer(in.input, n, &part, &part_size, &type, &type_id));
      TRY(TRITONSERVER_InferenceRequestAppendInputData(irequest, branch->inputs[k], part, part_size, type, type_id));
    }
  }
  for (int k = 0; k < branch->output_count; k++)
    TRY(TRITONSERVER_InferenceRequestAddRequestedOutput(irequest, branch->outputs[k]));
  return NULL;
}

/* call branch b for the request; its callbacks count down c->pending (2 of them) */
static void call_branch(Call* c, int b)
{
  const char* model = c->sw->branches[b].model;
  TRITONSERVER_InferenceRequest* irequest = NULL;
  Pending* p = malloc(sizeof *p);
  if (p == NULL) {
    call_failed(c, error(TRITONSERVER_ERROR_INTERNAL, "out of memory", NULL), NULL);
    return;
  }
  p->call = c;
  p->branch = b;
  TRITONSERVER_Error* err = TRITONSERVER_InferenceRequestNew(&irequest, c->sw->server, model, -1);
  if (err == NULL) err = branch_request(c, b, irequest);
  if (err == NULL) err = TRITONSERVER_InferenceRequestSetReleaseCallback(irequest, branch_released, p);
  if (err == NULL)
    err = TRITONSERVER_InferenceRequestSetResponseCallback(irequest, c->sw->allocator, c->sw, branch_answered, p);
  if (err == NULL) {
    __atomic_add_fetch(&c->pending, 2, __ATOMIC_ACQ_REL);
    err = TRITONSERVER_ServerInferAsync(c->sw->server, irequest, NULL);
    if (err == NULL) return;
    __atomic_sub_fetch(&c->pending, 2, __ATOMIC_ACQ_REL); /* the execute's hold keeps it above 0 */
  }
  if (irequest != NULL) TRITONSERVER_InferenceRequestDelete(irequest);
  free(p);
  call_failed(c, err, model);
}

static void switch_execute(TRITONBACKEND_ModelInstance* instance, ModelState* model, TRITONBACKEND_Request* request)
{
  Switch* sw = model->sw;
  Call* c = calloc(1, sizeof *c);
  TRITONSERVER_InferenceResponse** responses = calloc((size_t)sw->branch_count + 1, sizeof *responses);
  if (c == NULL || responses == NULL) {
    free(c);
    free(responses);
    TRITONBACKEND_Response* response = NULL;
    if (TRITONBACKEND_ResponseNew(&response, request) == NULL) {
      TRITONSERVER_Error* sent = TRITONBACKEND_ResponseSend(
          response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error(TRITONSERVER_ERROR_INTERNAL, "out of memory", NULL));
      if (sent != NULL) TRITONSERVER_ErrorDelete(sent);
    }
    TRITONSERVER_Error* released = TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
    if (released != NULL) TRITONSERVER_ErrorDelete(released);
    return;
  }
  c->instance = instance;
  c->sw = sw;
  c->request = request;
  c->start_ns = now_ns();
  c->pending = 1;
  c->responses = responses;
  /* every condition first: a request whose condition fails calls no branch */
  int* take = calloc((size_t)sw->branch_count + 1, sizeof *take);
  if (take == NULL) call_failed(c, error(TRITONSERVER_ERROR_INTERNAL, "out of memory", NULL), NULL);
  for (int b = 0; b < sw->branch_count && c->err == NULL; b++) {
    TRITONSERVER_Error* err = taken(sw, request, &sw->branches[b], &take[b]);
    if (err != NULL) call_failed(c, err, NULL);
  }
  c->take = take;
  for (int b = 0; b < sw->branch_count && c->err == NULL; b++)
    if (take[b] && !sw->branches[b].speculative) call_branch(c, b);
  done_one(c);
}
