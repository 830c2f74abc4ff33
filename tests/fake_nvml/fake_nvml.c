/*
 * fake_nvml.c - a fake libnvidia-ml.so.1 for tests that have no GPU.
 *
 * It implements the subset of NVML that nvidia-ml-py (module pynvml) 13.615
 * calls for a GPU exporter, with deterministic values, and exports a few
 * fake_nvml_* control functions for tests that load it in-process.
 * See README.md next to this file for the configuration syntax and values.
 *
 * Build:
 *   gcc -shared -fPIC -O2 -Wall -Wl,-soname,libnvidia-ml.so.1 \
 *       -o libnvidia-ml.so.1 fake_nvml.c -lpthread
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* NVML types and constants (values as in pynvml / nvml.h)             */
/* ------------------------------------------------------------------ */

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999
};

enum {
    NVML_VALUE_TYPE_UNSIGNED_INT = 1,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
};

enum {
    NVML_FI_DEV_ECC_SBE_VOL_TOTAL = 3,
    NVML_FI_DEV_ECC_DBE_VOL_TOTAL = 4,
    NVML_FI_DEV_ECC_SBE_AGG_TOTAL = 5,
    NVML_FI_DEV_ECC_DBE_AGG_TOTAL = 6,
    NVML_FI_DEV_MEMORY_TEMP = 82,
    NVML_FI_DEV_REMAPPED_COR = 142,
    NVML_FI_DEV_REMAPPED_UNC = 143,
    NVML_FI_DEV_REMAPPED_FAILURE = 145,
    /* NVLink: error totals over all links; data throughput (KiB) per link = scope */
    NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL = 38,
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL = 45,
    NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL = 52,
    NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL = 59,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
};

/* Versioned structs: (struct version << 24) | sizeof(struct). */
#define NVML_MEMORY_V2_VERSION 0x02000028u
#define NVML_TEMPERATURE_V1_VERSION 0x0100000Cu
#define NVML_GI_PROFILE_INFO_V2_VERSION 0x02000098u
#define NVML_GPM_SUPPORT_VERSION 1u

/* Opaque handle targets: handles are addresses inside the arrays below. */
struct fake_device {
    unsigned gpu;
    unsigned gi_id; /* MIG handles only */
    unsigned is_mig;
};
struct fake_gpu_instance {
    unsigned gpu;
    unsigned gi_id;
};
typedef struct fake_device *nvmlDevice_t;
typedef struct fake_gpu_instance *nvmlGpuInstance_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int version;
    unsigned int sensorType;
    int temperature;
} nvmlTemperature_v1_t;

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    unsigned int valueType;
    unsigned int nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_v3_t;

typedef struct {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct {
    unsigned int start;
    unsigned int size;
} nvmlGpuInstancePlacement_t;

typedef struct {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profileId;
    nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct {
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct {
    unsigned int version;
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} nvmlGpuInstanceProfileInfo_v2_t;

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

/* Compile-time checks against the sizes encoded in pynvml's versions. */
_Static_assert(sizeof(nvmlMemory_v2_t) == (NVML_MEMORY_V2_VERSION & 0xFFFFFFu),
               "nvmlMemory_v2_t size");
_Static_assert(sizeof(nvmlTemperature_v1_t) ==
                   (NVML_TEMPERATURE_V1_VERSION & 0xFFFFFFu),
               "nvmlTemperature_v1_t size");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_v2_t) ==
                   (NVML_GI_PROFILE_INFO_V2_VERSION & 0xFFFFFFu),
               "nvmlGpuInstanceProfileInfo_v2_t size");
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t size");
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t size");
_Static_assert(sizeof(nvmlProcessInfo_v3_t) == 24, "nvmlProcessInfo_v3_t size");

typedef struct {
    unsigned long long referenceTime; /* us */
    unsigned long long violationTime; /* ns */
} nvmlViolationTime_t;

#define NVML_GRID_LICENSE_BUFFER_SIZE 128
#define NVML_GRID_LICENSE_FEATURE_MAX_COUNT 3

typedef struct {
    unsigned int year;
    unsigned short month, day, hour, min, sec;
    unsigned char status;
} nvmlGridLicenseExpiry_t;

typedef struct {
    unsigned int featureCode; /* 1: vGPU */
    unsigned int featureState; /* non-zero: licensed */
    char licenseInfo[NVML_GRID_LICENSE_BUFFER_SIZE];
    char productName[NVML_GRID_LICENSE_BUFFER_SIZE];
    unsigned int featureEnabled;
    nvmlGridLicenseExpiry_t licenseExpiry;
} nvmlGridLicensableFeature_t;

typedef struct {
    int isGridLicenseSupported;
    unsigned int licensableFeaturesCount;
    nvmlGridLicensableFeature_t gridLicensableFeatures[NVML_GRID_LICENSE_FEATURE_MAX_COUNT];
} nvmlGridLicensableFeatures_t; /* _v4, as pynvml 13.615 lays it out */

_Static_assert(sizeof(nvmlViolationTime_t) == 16, "nvmlViolationTime_t size");
_Static_assert(sizeof(nvmlGridLicensableFeatures_t) == 860,
               "nvmlGridLicensableFeatures_v4_t size");

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp; /* CPU time, microseconds */
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

_Static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32,
               "nvmlProcessUtilizationSample_t size");

/* ------------------------------------------------------------------ */
/* Limits and fixed data                                               */
/* ------------------------------------------------------------------ */

#define MAX_GPUS 64u
#define MAX_GI_ID 64u         /* gi ids 0..63 */
#define MAX_MIG_INSTANCES 7u  /* per GPU */
#define MAX_PROCS 16u         /* configured processes per GPU */
#define NO_ID 0xFFFFFFFFu     /* gpuInstanceId / computeInstanceId: none */
#define VALUE_NOT_AVAILABLE_ULL 0xFFFFFFFFFFFFFFFFull
#define MIB (1024ull * 1024ull)

#define GPU_MEMORY_TOTAL 85899345920ull /* 80 GiB */
#define GPU_MEMORY_RESERVED (512ull * MIB)
#define ENERGY_STEP_MJ 100ull

static const char NAME_PLAIN[] = "NVIDIA H100 80GB HBM3";
static const char NAME_MIG[] = "NVIDIA A100-SXM4-80GB";
static const char VBIOS_VERSION[] = "96.00.89.00.01";
static const char DEFAULT_DRIVER_VERSION[] = "580.105.08";

struct gi_profile {
    unsigned profile_enum;
    unsigned id;
    const char *name;
    unsigned slices;
    unsigned instance_count;
    unsigned sms;
    unsigned copy_engines;
    unsigned decoders;
    unsigned jpegs;
    unsigned ofas;
    unsigned long long memory_mb;
};

static const struct gi_profile PROFILES[] = {
    {0, 19, "MIG 1g.10gb", 1, 7, 14, 1, 0, 0, 0, 9984ull},
    {1, 14, "MIG 2g.20gb", 2, 3, 28, 2, 1, 0, 0, 20096ull},
    {2, 9, "MIG 3g.40gb", 3, 2, 42, 3, 2, 0, 0, 40192ull},
    {3, 5, "MIG 4g.40gb", 4, 1, 56, 4, 2, 0, 0, 40192ull},
    {4, 0, "MIG 7g.80gb", 7, 1, 98, 7, 5, 1, 1, 80896ull},
};
#define N_PROFILES (sizeof(PROFILES) / sizeof(PROFILES[0]))

static const struct gi_profile *profile_by_id(unsigned id)
{
    for (size_t k = 0; k < N_PROFILES; k++)
        if (PROFILES[k].id == id)
            return &PROFILES[k];
    return NULL;
}

static const struct gi_profile *profile_by_enum(unsigned e)
{
    for (size_t k = 0; k < N_PROFILES; k++)
        if (PROFILES[k].profile_enum == e)
            return &PROFILES[k];
    return NULL;
}

/* Keys of FAKE_NVML_NOT_SUPPORTED, in bit order. */
enum ns_key {
    KEY_UTIL,
    KEY_ENC,
    KEY_DEC,
    KEY_MEMORY,
    KEY_MEMORY_V2,
    KEY_POWER,
    KEY_ENERGY,
    KEY_CLOCK,
    KEY_TEMP,
    KEY_MEMTEMP,
    KEY_PCIE_REPLAY,
    KEY_MINOR,
    KEY_PROCESSES,
    KEY_SERIAL,
    KEY_VBIOS,
    KEY_PROC_UTIL,
    KEY_VIOLATION,
    KEY_CLOCK_EVENTS,
    KEY_RETIRED,
    KEY_NVLINK,
    KEY_LICENSE,
    KEY_POWER_LIMIT,
    KEY_FAN,
    KEY_PSTATE,
    KEY_INFOROM,
    KEY_BRAND,
    KEY_P2P,
    KEY_MPS,
    KEY_COUNT,
    KEY_NONE = -1
};

static const char *const KEY_NAMES[KEY_COUNT] = {
    "util",  "enc",     "dec",         "memory", "memory_v2",
    "power", "energy",  "clock",       "temp",   "memtemp",
    "pcie_replay", "minor", "processes", "serial", "vbios",
    "proc_util", "violation", "clock_events", "retired", "nvlink", "license",
    "power_limit", "fan", "pstate", "inforom", "brand", "p2p", "mps",
};
_Static_assert(KEY_COUNT <= 32, "NOT_SUPPORTED keys are bits of a uint32_t");

static int key_from_name(const char *s, size_t len)
{
    for (int k = 0; k < KEY_COUNT; k++)
        if (strlen(KEY_NAMES[k]) == len && strncmp(KEY_NAMES[k], s, len) == 0)
            return k;
    return -1;
}

/* Every exported NVML symbol, for the call counters. */
#define FAKE_NVML_SYMBOLS(X)                        \
    X(nvmlInit_v2)                                  \
    X(nvmlInitWithFlags)                            \
    X(nvmlShutdown)                                 \
    X(nvmlErrorString)                              \
    X(nvmlSystemGetDriverVersion)                   \
    X(nvmlSystemGetNVMLVersion)                     \
    X(nvmlSystemGetCudaDriverVersion)               \
    X(nvmlSystemGetCudaDriverVersion_v2)            \
    X(nvmlDeviceGetCount_v2)                        \
    X(nvmlDeviceGetHandleByIndex_v2)                \
    X(nvmlDeviceGetHandleByUUID)                    \
    X(nvmlDeviceGetHandleByPciBusId_v2)             \
    X(nvmlDeviceGetIndex)                           \
    X(nvmlDeviceGetName)                            \
    X(nvmlDeviceGetUUID)                            \
    X(nvmlDeviceGetSerial)                          \
    X(nvmlDeviceGetVbiosVersion)                    \
    X(nvmlDeviceGetPciInfo_v3)                      \
    X(nvmlDeviceGetMinorNumber)                     \
    X(nvmlDeviceGetUtilizationRates)                \
    X(nvmlDeviceGetEncoderUtilization)              \
    X(nvmlDeviceGetDecoderUtilization)              \
    X(nvmlDeviceGetMemoryInfo)                      \
    X(nvmlDeviceGetMemoryInfo_v2)                   \
    X(nvmlDeviceGetPowerUsage)                      \
    X(nvmlDeviceGetTotalEnergyConsumption)          \
    X(nvmlDeviceGetClockInfo)                       \
    X(nvmlDeviceGetMaxClockInfo)                    \
    X(nvmlDeviceGetTemperature)                     \
    X(nvmlDeviceGetTemperatureV)                    \
    X(nvmlDeviceGetFieldValues)                     \
    X(nvmlDeviceGetPcieReplayCounter)               \
    X(nvmlDeviceGetViolationStatus)                 \
    X(nvmlDeviceGetCurrentClocksEventReasons)       \
    X(nvmlDeviceGetRetiredPages)                    \
    X(nvmlDeviceGetRetiredPagesPendingStatus)       \
    X(nvmlDeviceGetGridLicensableFeatures_v4)       \
    X(nvmlDeviceGetPowerManagementLimit)            \
    X(nvmlDeviceGetPowerManagementLimitConstraints) \
    X(nvmlDeviceGetPowerManagementDefaultLimit)     \
    X(nvmlDeviceGetEnforcedPowerLimit)              \
    X(nvmlDeviceGetFanSpeed)                        \
    X(nvmlDeviceGetPerformanceState)                \
    X(nvmlDeviceGetBrand)                           \
    X(nvmlDeviceGetInforomVersion)                  \
    X(nvmlDeviceGetInforomImageVersion)             \
    X(nvmlDeviceGetP2PStatus)                       \
    X(nvmlDeviceGetComputeRunningProcesses_v3)      \
    X(nvmlDeviceGetGraphicsRunningProcesses_v3)     \
    X(nvmlDeviceGetMPSComputeRunningProcesses_v3)   \
    X(nvmlDeviceGetMPSComputeRunningProcesses_v2)   \
    X(nvmlDeviceGetProcessUtilization)              \
    X(nvmlDeviceGetMigMode)                         \
    X(nvmlDeviceIsMigDeviceHandle)                  \
    X(nvmlDeviceGetMaxMigDeviceCount)               \
    X(nvmlDeviceGetMigDeviceHandleByIndex)          \
    X(nvmlDeviceGetGpuInstanceId)                   \
    X(nvmlDeviceGetComputeInstanceId)               \
    X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle) \
    X(nvmlDeviceGetAttributes_v2)                   \
    X(nvmlDeviceGetGpuInstanceById)                 \
    X(nvmlGpuInstanceGetInfo)                       \
    X(nvmlDeviceGetGpuInstanceProfileInfo)          \
    X(nvmlDeviceGetGpuInstanceProfileInfoV)         \
    X(nvmlDeviceGetGpuInstanceProfileInfoByIdV)     \
    X(nvmlEventSetCreate)                           \
    X(nvmlEventSetFree)                             \
    X(nvmlEventSetWait_v2)                          \
    X(nvmlDeviceGetSupportedEventTypes)             \
    X(nvmlDeviceRegisterEvents)                     \
    X(nvmlGpmQueryDeviceSupport)                    \
    X(nvmlGpmSampleAlloc)                           \
    X(nvmlGpmSampleFree)                            \
    X(nvmlGpmSampleGet)                             \
    X(nvmlGpmMigSampleGet)                          \
    X(nvmlGpmMetricsGet)

#define SYM_ENUM(name) SYM_##name,
enum sym { FAKE_NVML_SYMBOLS(SYM_ENUM) SYM_COUNT };
#undef SYM_ENUM

#define SYM_STR(name) #name,
static const char *const SYM_NAMES[SYM_COUNT] = {FAKE_NVML_SYMBOLS(SYM_STR)};
#undef SYM_STR

/* ------------------------------------------------------------------ */
/* Cost profiles (FAKE_NVML_COST_PROFILE)                              */
/* ------------------------------------------------------------------ */

/*
 * The CPU a call burns (a busy-wait on the calling thread's CPU clock, outside
 * g_lock) under a cost profile. "h100": the per-call figures measured on a real
 * NVIDIA H100 80GB HBM3, driver 580.159.04, where wall time = CPU time (the
 * driver spins; it does not sleep), from real-gpu-h100.md (the project's
 * shared reference, /work/shared/reference/real-gpu-h100.md: "NVML per-call
 * cost on the real driver" and "More calls"). Entries name symbols by string so that a symbol
 * this library does not implement yet takes its cost as soon as it is added to
 * FAKE_NVML_SYMBOLS. A symbol not listed costs default_device_us if it is a
 * device query (nvmlDevice*, nvmlGpm*, nvmlGpuInstance*), else nothing.
 */
struct sym_cost {
    const char *symbol;
    unsigned us;
};
struct field_cost {
    unsigned field_id;
    unsigned us;
};
struct cost_profile {
    const char *name;
    const struct sym_cost *syms;
    size_t n_syms;
    unsigned default_device_us;
    /* nvmlDeviceGetFieldValues: the sum of these for the ids in the batch
     * (each counted once; batching does not hide them), or field_values_us
     * when the batch holds none of them. */
    const struct field_cost *fields;
    size_t n_fields;
    unsigned field_values_us;
};

static const struct sym_cost COST_H100_SYMS[] = {
    {"nvmlDeviceGetTotalEnergyConsumption", 3900},   /* 3,860-4,005 */
    {"nvmlGpmMetricsGet", 1300},                     /* 1,180-1,660 whatever the count */
    {"nvmlDeviceGetViolationStatus", 700},           /* 685-707 per policy */
    {"nvmlDeviceGetPowerManagementLimit", 180},      /* 180 */
    {"nvmlDeviceGetGridLicensableFeatures_v4", 180}, /* 183 */
    {"nvmlDeviceGetMigMode", 150},                   /* 138-186 */
    {"nvmlDeviceGetPcieReplayCounter", 145},         /* 143-147 */
    {"nvmlGpmSampleGet", 37},                        /* 37 */
    {"nvmlGpmMigSampleGet", 37},
    {"nvmlDeviceGetMemoryInfo", 10},                 /* 6-16 */
    {"nvmlDeviceGetMemoryInfo_v2", 10},
    {"nvmlDeviceGetName", 8},                        /* strings: 1.5-10 */
    {"nvmlDeviceGetUUID", 8},
    {"nvmlDeviceGetSerial", 8},
    {"nvmlDeviceGetVbiosVersion", 8},
    {"nvmlSystemGetDriverVersion", 8},
    {"nvmlSystemGetNVMLVersion", 8},
    {"nvmlDeviceGetInforomVersion", 8},
    {"nvmlDeviceGetInforomImageVersion", 8},
};
static const struct field_cost COST_H100_FIELDS[] = {
    {83, 3900}, /* NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: 3,820-4,600 batched */
    {94, 145},  /* NVML_FI_DEV_PCIE_REPLAY_COUNTER */
};

static const struct cost_profile COST_PROFILES[] = {
    {"h100", COST_H100_SYMS, sizeof COST_H100_SYMS / sizeof COST_H100_SYMS[0],
     5, /* every other device call: 1-12 */
     COST_H100_FIELDS, sizeof COST_H100_FIELDS / sizeof COST_H100_FIELDS[0],
     10 /* FieldValues[3,4,5,6] (ECC totals), [82,142,...] */},
};
#define N_COST_PROFILES (sizeof COST_PROFILES / sizeof COST_PROFILES[0])

static const struct cost_profile *cost_profile_by_name(const char *s, size_t len)
{
    for (size_t k = 0; k < N_COST_PROFILES; k++)
        if (strlen(COST_PROFILES[k].name) == len &&
            strncasecmp(COST_PROFILES[k].name, s, len) == 0)
            return &COST_PROFILES[k];
    return NULL;
}

/* ------------------------------------------------------------------ */
/* State (all guarded by g_lock)                                       */
/* ------------------------------------------------------------------ */

struct gi_cfg {
    unsigned gi_id;
    unsigned start; /* placement start slice */
    const struct gi_profile *profile;
};

struct mig_cfg {
    int enabled;
    unsigned n;
    struct gi_cfg gi[MAX_MIG_INSTANCES];
};

/* Process kinds: the running-process lists a process is in. KIND_MPS: the MPS
 * list (an MPS client). */
enum { KIND_COMPUTE = 1u, KIND_GRAPHICS = 2u, KIND_MPS = 4u };

struct proc_cfg {
    unsigned pid;
    unsigned long long used;  /* bytes; VALUE_NOT_AVAILABLE_ULL: unknown */
    unsigned gi;              /* GPU instance it runs in; NO_ID: none */
    int hide_gi;              /* the parent handle reports NO_ID for it */
    int sm, mem;              /* utilisation percent; sm -1: no sample */
    unsigned kinds;           /* KIND_* bits */
};

struct procs_cfg {
    int set; /* 0: the built-in default (even GPUs run pid 4000+i) */
    unsigned n;
    struct proc_cfg p[MAX_PROCS];
};

struct config {
    unsigned gpu_count;
    struct mig_cfg mig[MAX_GPUS];
    struct procs_cfg procs[MAX_GPUS]; /* FAKE_NVML_PROCESSES */
    uint32_t not_supported[MAX_GPUS]; /* bit per enum ns_key */
    unsigned char lost[MAX_GPUS];
    unsigned char gpm[MAX_GPUS]; /* FAKE_NVML_GPM: GPUs that support GPM */
    long minor[MAX_GPUS]; /* -1: default (= index) */
    char driver_version[80];
    int init_error;
    int count_error;
    unsigned long delay_us;
    const struct cost_profile *cost; /* FAKE_NVML_COST_PROFILE; NULL: off */
    char hang_file[256]; /* FAKE_NVML_HANG_FILE; "": off */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct config g_env;    /* parsed from the environment */
static int g_env_loaded;       /* g_env has been read at least once */
static int g_env_bad;          /* the last read found a bad variable */
static unsigned g_refcount;    /* nvmlInit* minus nvmlShutdown */
static char g_last_error[512]; /* last configuration / control error */

/* Runtime overrides set by the control functions; cleared by reset. */
static signed char g_lost_ovr[MAX_GPUS]; /* -1: none */
static uint32_t g_ns_on[MAX_GPUS];
static uint32_t g_ns_off[MAX_GPUS];
static unsigned char g_mig_ovr_set[MAX_GPUS];
static struct mig_cfg g_mig_ovr[MAX_GPUS];
static struct procs_cfg g_procs_ovr[MAX_GPUS]; /* used when .set */

/* nvmlDeviceGetProcessUtilization bookkeeping, per GPU; cleared by reset. */
static unsigned long long g_pu_last_seen[MAX_GPUS]; /* lastSeenTimeStamp asked */
static unsigned long long g_pu_newest[MAX_GPUS];    /* newest stamp returned */
static unsigned long long g_pu_clock;               /* last sample base stamp */

static unsigned long long g_calls[SYM_COUNT];
static unsigned long long g_total_calls;

/* Cost profile: the override set by fake_nvml_set_cost_profile (cleared by
 * reset), the effective per-symbol cost, and the thread CPU spent in calls
 * while a profile is on, per symbol. */
static int g_cost_ovr_set;
static const struct cost_profile *g_cost_ovr;
static const struct cost_profile *g_cost; /* effective; NULL: off */
static unsigned g_sym_cost_us[SYM_COUNT];
static unsigned long long g_cpu_ns[SYM_COUNT];
static unsigned long long g_energy_reads[MAX_GPUS];

/* Handle targets. */
static struct fake_device g_phys[MAX_GPUS];
static struct fake_device g_mig_handles[MAX_GPUS][MAX_GI_ID];
static struct fake_gpu_instance g_gi_handles[MAX_GPUS][MAX_GI_ID];

__attribute__((constructor)) static void fake_nvml_construct(void)
{
    for (unsigned g = 0; g < MAX_GPUS; g++) {
        g_phys[g].gpu = g;
        for (unsigned k = 0; k < MAX_GI_ID; k++) {
            g_mig_handles[g][k].gpu = g;
            g_mig_handles[g][k].gi_id = k;
            g_mig_handles[g][k].is_mig = 1;
            g_gi_handles[g][k].gpu = g;
            g_gi_handles[g][k].gi_id = k;
        }
    }
    for (unsigned g = 0; g < MAX_GPUS; g++)
        g_lost_ovr[g] = -1;
}

/* ------------------------------------------------------------------ */
/* Configuration parsing                                               */
/* ------------------------------------------------------------------ */

__attribute__((format(printf, 1, 2))) static void set_error(const char *fmt,
                                                             ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
    va_end(ap);
}

static const char *skip_ws(const char *p)
{
    while (*p && isspace((unsigned char)*p))
        p++;
    return p;
}

/* Parse an unsigned decimal number; returns the end or NULL. */
static const char *parse_uint(const char *p, unsigned long max,
                              unsigned long *out)
{
    p = skip_ws(p);
    if (!isdigit((unsigned char)*p))
        return NULL;
    char *end;
    errno = 0;
    unsigned long v = strtoul(p, &end, 10);
    if (errno || v > max)
        return NULL;
    *out = v;
    return skip_ws(end);
}

/* Parse "gi:profile,gi:profile" up to end (exclusive) into *m (enabled). */
static int parse_mig_list(const char *p, const char *end, struct mig_cfg *m)
{
    memset(m, 0, sizeof *m);
    m->enabled = 1;
    p = skip_ws(p);
    if (p >= end)
        return 0; /* MIG mode on, no instances */
    unsigned start = 0;
    for (;;) {
        unsigned long gi, prof;
        p = parse_uint(p, MAX_GI_ID - 1, &gi);
        if (!p || p >= end || *p != ':')
            return -1;
        p = parse_uint(p + 1, 0xFFFFFFFFul, &prof);
        if (!p || p > end)
            return -1;
        const struct gi_profile *pr = profile_by_id((unsigned)prof);
        if (!pr || m->n >= MAX_MIG_INSTANCES)
            return -1;
        for (unsigned k = 0; k < m->n; k++)
            if (m->gi[k].gi_id == gi)
                return -1;
        m->gi[m->n].gi_id = (unsigned)gi;
        m->gi[m->n].profile = pr;
        m->gi[m->n].start = start;
        start += pr->slices;
        m->n++;
        if (p == end)
            return 0;
        if (*p != ',')
            return -1;
        p++;
    }
}

static int parse_env_uint(const char *name, unsigned long max,
                          unsigned long def, unsigned long *out)
{
    const char *s = getenv(name);
    *out = def;
    if (!s || !*skip_ws(s))
        return 0;
    const char *e = parse_uint(s, max, out);
    if (!e || *e) {
        set_error("bad %s=%s", name, s);
        return -1;
    }
    return 0;
}

/* Parse "i,j,k" (FAKE_NVML_LOST, FAKE_NVML_GPM) into per-GPU flags. */
static int parse_index_list(const char *s, unsigned char *flags)
{
    const char *p = skip_ws(s);
    if (!*p)
        return 0;
    for (;;) {
        unsigned long g;
        p = parse_uint(p, MAX_GPUS - 1, &g);
        if (!p)
            return -1;
        flags[g] = 1;
        if (!*p)
            return 0;
        if (*p != ',')
            return -1;
        p++;
    }
}

/* Parse "i:key,*:key" (FAKE_NVML_NOT_SUPPORTED). */
static int parse_not_supported(const char *s, struct config *c)
{
    const char *p = skip_ws(s);
    if (!*p)
        return 0;
    for (;;) {
        unsigned long g = 0;
        int all = 0;
        if (*p == '*') {
            all = 1;
            p = skip_ws(p + 1);
        } else {
            p = parse_uint(p, MAX_GPUS - 1, &g);
            if (!p)
                return -1;
        }
        if (*p != ':')
            return -1;
        p = skip_ws(p + 1);
        const char *k0 = p;
        while (*p && *p != ',' && !isspace((unsigned char)*p))
            p++;
        int key = key_from_name(k0, (size_t)(p - k0));
        if (key < 0)
            return -1;
        for (unsigned i = 0; i < MAX_GPUS; i++)
            if (all || i == g)
                c->not_supported[i] |= 1u << key;
        p = skip_ws(p);
        if (!*p)
            return 0;
        if (*p != ',')
            return -1;
        p++;
    }
}

/* Parse "i:minor,j:minor" (FAKE_NVML_MINOR). */
static int parse_minor(const char *s, struct config *c)
{
    const char *p = skip_ws(s);
    if (!*p)
        return 0;
    for (;;) {
        unsigned long g, m;
        p = parse_uint(p, MAX_GPUS - 1, &g);
        if (!p || *p != ':')
            return -1;
        p = parse_uint(p + 1, 0x7FFFFFFFul, &m);
        if (!p)
            return -1;
        c->minor[g] = (long)m;
        if (!*p)
            return 0;
        if (*p != ',')
            return -1;
        p++;
    }
}

/* Parses GPU g's list [p, end) of a "i=list;j=list" variable into *c. */
typedef int (*gpu_list_fn)(struct config *c, unsigned g, const char *p,
                           const char *end);

/* Walk "i=list;j=list" (blank entries skipped), calling list() per entry. */
static int parse_gpu_lists(const char *s, struct config *c, gpu_list_fn list)
{
    const char *p = s;
    while (*p) {
        const char *end = strchr(p, ';');
        if (!end)
            end = p + strlen(p);
        if (*skip_ws(p) && skip_ws(p) < end) {
            unsigned long g;
            const char *q = parse_uint(p, MAX_GPUS - 1, &g);
            if (!q || q >= end || *q != '=')
                return -1;
            if (list(c, (unsigned)g, q + 1, end) != 0)
                return -1;
        }
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* FAKE_NVML_MIG entry: "i=gi:prof,...". */
static int mig_list(struct config *c, unsigned g, const char *p,
                    const char *end)
{
    return parse_mig_list(p, end, &c->mig[g]);
}

/* Copy the field [s, e) without surrounding blanks into buf; -1 if too long. */
static int field_text(const char *s, const char *e, char *buf, size_t len)
{
    s = skip_ws(s);
    while (e > s && isspace((unsigned char)e[-1]))
        e--;
    if ((size_t)(e - s) >= len)
        return -1;
    memcpy(buf, s, (size_t)(e - s));
    buf[e - s] = '\0';
    return 0;
}

/* A whole-field unsigned number; "" or "-" gives def (when allowed). */
static int field_uint(const char *f, unsigned long max, int optional,
                      unsigned long def, unsigned long *out)
{
    if (!*f || strcmp(f, "-") == 0) {
        *out = def;
        return optional ? 0 : -1;
    }
    const char *e = parse_uint(f, max, out);
    return e && !*e ? 0 : -1;
}

/* One process: "PID:MIB[:GI[:SM[:MEM[:KIND]]]]" in [p, end). */
static int parse_proc(const char *p, const char *end, struct proc_cfg *out)
{
    char f[6][32];
    unsigned nf = 0;
    for (;;) {
        const char *colon = memchr(p, ':', (size_t)(end - p));
        const char *e = colon ? colon : end;
        if (nf >= 6 || field_text(p, e, f[nf], sizeof f[nf]) != 0)
            return -1;
        nf++;
        if (!colon)
            break;
        p = colon + 1;
    }
    while (nf < 6)
        f[nf++][0] = '\0';
    unsigned long v;
    if (field_uint(f[0], 0xFFFFFFFEul, 0, 0, &v) != 0)
        return -1;
    out->pid = (unsigned)v;
    if (strcmp(f[1], "-") == 0) {
        out->used = VALUE_NOT_AVAILABLE_ULL; /* as WDDM or a restricted view */
    } else {
        if (field_uint(f[1], 1ul << 30, 0, 0, &v) != 0)
            return -1;
        out->used = (unsigned long long)v * MIB;
    }
    const char *gi = f[2];
    out->hide_gi = gi[0] == '~';
    if (field_uint(gi + out->hide_gi, MAX_GI_ID - 1, !out->hide_gi, NO_ID,
                   &v) != 0)
        return -1;
    out->gi = (unsigned)v;
    if (field_uint(f[3], 100, 1, (unsigned long)-1, &v) != 0)
        return -1;
    out->sm = (int)(long)v;
    if (field_uint(f[4], 100, 1, (unsigned long)-1, &v) != 0)
        return -1;
    out->mem = (int)(long)v;
    if (!f[5][0] || strcmp(f[5], "c") == 0)
        out->kinds = KIND_COMPUTE;
    else if (strcmp(f[5], "g") == 0)
        out->kinds = KIND_GRAPHICS;
    else if (strcmp(f[5], "b") == 0)
        out->kinds = KIND_COMPUTE | KIND_GRAPHICS;
    else if (strcmp(f[5], "m") == 0)
        out->kinds = KIND_MPS;
    else if (strcmp(f[5], "M") == 0)
        out->kinds = KIND_MPS | KIND_COMPUTE; /* nvidia-smi's M+C */
    else
        return -1;
    return 0;
}

/* Parse "proc,proc" up to end (exclusive) into *pc (set); "" is no processes. */
static int parse_proc_list(const char *p, const char *end, struct procs_cfg *pc)
{
    memset(pc, 0, sizeof *pc);
    pc->set = 1;
    p = skip_ws(p);
    if (p >= end)
        return 0;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        if (pc->n >= MAX_PROCS || parse_proc(p, e, &pc->p[pc->n]) != 0)
            return -1;
        for (unsigned k = 0; k < pc->n; k++)
            if (pc->p[k].pid == pc->p[pc->n].pid)
                return -1; /* one entry per pid: kind b puts it in both lists */
        pc->n++;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

/* FAKE_NVML_PROCESSES entry: "i=proc,proc". */
static int procs_list(struct config *c, unsigned g, const char *p,
                      const char *end)
{
    return parse_proc_list(p, end, &c->procs[g]);
}

/* Read all FAKE_NVML_* variables into g_env; -1 (and g_last_error) if bad. */
static int load_env(void)
{
    static struct config c; /* large: keep off the stack */
    unsigned long v;
    const char *s;
    int bad = 0;

    memset(&c, 0, sizeof c);
    for (unsigned g = 0; g < MAX_GPUS; g++)
        c.minor[g] = -1;
    snprintf(c.driver_version, sizeof c.driver_version, "%s",
             DEFAULT_DRIVER_VERSION);

    if (parse_env_uint("FAKE_NVML_GPU_COUNT", MAX_GPUS, 2, &v) != 0)
        bad = 1;
    c.gpu_count = (unsigned)v;
    if (parse_env_uint("FAKE_NVML_DEVICE_DELAY_US", 60000000ul, 0, &v) != 0)
        bad = 1;
    c.delay_us = v;

    s = getenv("FAKE_NVML_COST_PROFILE");
    if (s) {
        const char *b = skip_ws(s), *e = b + strlen(b);
        while (e > b && isspace((unsigned char)e[-1]))
            e--;
        if (e > b) {
            c.cost = cost_profile_by_name(b, (size_t)(e - b));
            if (!c.cost) {
                set_error("bad %s=%s (known: h100, or empty for off)",
                          "FAKE_NVML_COST_PROFILE", s);
                bad = 1;
            }
        }
    }

    s = getenv("FAKE_NVML_INIT_ERROR");
    if (s && *skip_ws(s)) {
        char *end;
        errno = 0;
        long e = strtol(s, &end, 10);
        if (errno || *skip_ws(end) || e < 0 || e > 0x7FFFFFFF) {
            set_error("bad %s=%s", "FAKE_NVML_INIT_ERROR", s);
            bad = 1;
        } else {
            c.init_error = (int)e;
        }
    }

    s = getenv("FAKE_NVML_COUNT_ERROR");
    if (s && *skip_ws(s)) {
        char *end;
        errno = 0;
        long e = strtol(s, &end, 10);
        if (errno || *skip_ws(end) || e < 0 || e > 0x7FFFFFFF) {
            set_error("bad %s=%s", "FAKE_NVML_COUNT_ERROR", s);
            bad = 1;
        } else {
            c.count_error = (int)e;
        }
    }

    s = getenv("FAKE_NVML_HANG_FILE");
    if (s && *s) {
        if (strlen(s) >= sizeof c.hang_file) {
            set_error("bad %s=%s (too long)", "FAKE_NVML_HANG_FILE", s);
            bad = 1;
        } else {
            snprintf(c.hang_file, sizeof c.hang_file, "%s", s);
        }
    }

    s = getenv("FAKE_NVML_DRIVER_VERSION");
    if (s && *s) {
        if (strlen(s) >= 60) {
            set_error("bad %s=%s (too long)", "FAKE_NVML_DRIVER_VERSION", s);
            bad = 1;
        } else {
            snprintf(c.driver_version, sizeof c.driver_version, "%s", s);
        }
    }

    s = getenv("FAKE_NVML_LOST");
    if (s && parse_index_list(s, c.lost) != 0) {
        set_error("bad %s=%s", "FAKE_NVML_LOST", s);
        bad = 1;
    }
    s = getenv("FAKE_NVML_GPM");
    if (s && parse_index_list(s, c.gpm) != 0) {
        set_error("bad %s=%s", "FAKE_NVML_GPM", s);
        bad = 1;
    }
    s = getenv("FAKE_NVML_NOT_SUPPORTED");
    if (s && parse_not_supported(s, &c) != 0) {
        set_error("bad %s=%s", "FAKE_NVML_NOT_SUPPORTED", s);
        bad = 1;
    }
    s = getenv("FAKE_NVML_MINOR");
    if (s && parse_minor(s, &c) != 0) {
        set_error("bad %s=%s", "FAKE_NVML_MINOR", s);
        bad = 1;
    }
    s = getenv("FAKE_NVML_MIG");
    if (s && parse_gpu_lists(s, &c, mig_list) != 0) {
        set_error("bad %s=%s", "FAKE_NVML_MIG", s);
        bad = 1;
    }
    s = getenv("FAKE_NVML_PROCESSES");
    if (s && parse_gpu_lists(s, &c, procs_list) != 0) {
        set_error("bad %s=%s", "FAKE_NVML_PROCESSES", s);
        bad = 1;
    }

    g_env_loaded = 1;
    g_env_bad = bad;
    if (bad) {
        /* Fall back to the defaults so that behaviour stays defined. */
        memset(&c, 0, sizeof c);
        for (unsigned g = 0; g < MAX_GPUS; g++)
            c.minor[g] = -1;
        snprintf(c.driver_version, sizeof c.driver_version, "%s",
                 DEFAULT_DRIVER_VERSION);
        c.gpu_count = 2;
        fprintf(stderr, "fake_nvml: %s\n", g_last_error);
    }
    g_env = c;
    return bad ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* Effective state (g_lock held)                                       */
/* ------------------------------------------------------------------ */

static int gpu_is_lost(unsigned g)
{
    return g_lost_ovr[g] >= 0 ? g_lost_ovr[g] : g_env.lost[g];
}

static int key_not_supported(unsigned g, int key)
{
    if (key < 0)
        return 0;
    uint32_t bit = 1u << key;
    return ((g_env.not_supported[g] | g_ns_on[g]) & ~g_ns_off[g] & bit) != 0;
}

static const struct mig_cfg *mig_of(unsigned g)
{
    return g_mig_ovr_set[g] ? &g_mig_ovr[g] : &g_env.mig[g];
}

static const struct gi_cfg *find_gi(unsigned g, unsigned gi_id)
{
    const struct mig_cfg *m = mig_of(g);
    if (!m->enabled)
        return NULL;
    for (unsigned k = 0; k < m->n; k++)
        if (m->gi[k].gi_id == gi_id)
            return &m->gi[k];
    return NULL;
}

/* GPU g's processes: the override, FAKE_NVML_PROCESSES, or the default. */
static const struct procs_cfg *procs_of(unsigned g)
{
    static struct procs_cfg def;
    if (g_procs_ovr[g].set)
        return &g_procs_ovr[g];
    if (g_env.procs[g].set)
        return &g_env.procs[g];
    memset(&def, 0, sizeof def);
    if (g % 2u == 0u) {
        def.n = 1;
        def.p[0].pid = 4000u + g;
        def.p[0].used = 256ull * MIB;
        def.p[0].gi = NO_ID;
        def.p[0].sm = def.p[0].mem = -1;
        def.p[0].kinds = KIND_COMPUTE | KIND_GRAPHICS;
    }
    return &def;
}

static const char *gpu_name(unsigned g)
{
    /* Decided by FAKE_NVML_MIG as read from the environment. */
    return g_env.mig[g].enabled ? NAME_MIG : NAME_PLAIN;
}

static void gpu_uuid(unsigned g, char *buf, size_t len)
{
    snprintf(buf, len, "GPU-fa4e%04x-7953-256e-8f33-1343419b1a1c", g);
}

static void mig_uuid(unsigned g, unsigned gi_id, char *buf, size_t len)
{
    snprintf(buf, len, "MIG-fa4e%04x-%04x-5000-8000-000000000000", g, gi_id);
}

static unsigned gpu_bus(unsigned g)
{
    return 0x18u + 0x10u * g;
}

/* ------------------------------------------------------------------ */
/* Call prologue / epilogue                                            */
/* ------------------------------------------------------------------ */

static void sleep_us(unsigned long us)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(us / 1000000ul);
    ts.tv_nsec = (long)(us % 1000000ul) * 1000l;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static unsigned long long thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull +
           (unsigned long long)ts.tv_nsec;
}

/* Busy-wait until this thread has used `us` more microseconds of CPU: like the
 * real driver, the cost is CPU, not a sleep (and not counted while preempted). */
static void burn_us(unsigned us)
{
    unsigned long long until = thread_cpu_ns() + 1000ull * us;
    while (thread_cpu_ns() < until) {
    }
}

/* Make the cost profile `p` (NULL: off) effective (g_lock held). */
static void apply_cost_profile(const struct cost_profile *p)
{
    g_cost = p;
    memset(g_sym_cost_us, 0, sizeof g_sym_cost_us);
    if (!p)
        return;
    for (int s = 0; s < SYM_COUNT; s++) {
        const char *n = SYM_NAMES[s];
        if (strncmp(n, "nvmlDevice", 10) == 0 || strncmp(n, "nvmlGpm", 7) == 0 ||
            strncmp(n, "nvmlGpuInstance", 15) == 0)
            g_sym_cost_us[s] = p->default_device_us;
        for (size_t k = 0; k < p->n_syms; k++)
            if (strcmp(p->syms[k].symbol, n) == 0)
                g_sym_cost_us[s] = p->syms[k].us;
    }
}

static void refresh_cost_profile(void)
{
    apply_cost_profile(g_cost_ovr_set ? g_cost_ovr : g_env.cost);
}

/* nvmlDeviceGetFieldValues's cost for this batch (g_lock held, profile on). */
static unsigned field_values_cost_us(const nvmlFieldValue_t *values, int n)
{
    unsigned us = 0;
    for (size_t k = 0; k < g_cost->n_fields; k++) {
        for (int j = 0; values && j < n; j++) {
            if (values[j].fieldId == g_cost->fields[k].field_id) {
                us += g_cost->fields[k].us;
                break;
            }
        }
    }
    return us ? us : g_cost->field_values_us;
}

/* The call in progress on this thread, for the per-symbol CPU counters. */
static __thread int t_sym = -1;
static __thread unsigned long long t_cpu0;

/*
 * Count the call, apply the device delay and the cost profile's busy-wait
 * (both with g_lock released, so threads do not serialise on them), take the
 * lock. `fv`/`n_fv`: the batch of nvmlDeviceGetFieldValues, else NULL/0.
 */
static void enter_fv(enum sym s, int device_query, const nvmlFieldValue_t *fv,
                     int n_fv)
{
    pthread_mutex_lock(&g_lock);
    g_calls[s]++;
    g_total_calls++;
    unsigned long delay = device_query ? g_env.delay_us : 0;
    char hang[sizeof g_env.hang_file];
    snprintf(hang, sizeof hang, "%s", device_query ? g_env.hang_file : "");
    unsigned cost = 0;
    t_sym = -1;
    if (g_cost) {
        t_sym = (int)s;
        t_cpu0 = thread_cpu_ns();
        cost = s == SYM_nvmlDeviceGetFieldValues ? field_values_cost_us(fv, n_fv)
                                                 : g_sym_cost_us[s];
    }
    if (delay || cost || hang[0]) {
        pthread_mutex_unlock(&g_lock);
        /* A driver call stuck for as long as the test wants: until the file goes. */
        while (hang[0] && access(hang, F_OK) == 0)
            sleep_us(10000);
        if (delay)
            sleep_us(delay);
        if (cost)
            burn_us(cost);
        pthread_mutex_lock(&g_lock);
    }
}

static void enter(enum sym s, int device_query)
{
    enter_fv(s, device_query, NULL, 0);
}

static nvmlReturn_t leave(nvmlReturn_t rc)
{
    if (t_sym >= 0) {
        g_cpu_ns[t_sym] += thread_cpu_ns() - t_cpu0;
        t_sym = -1;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Enter a device query that takes no handle; checks initialization. */
static nvmlReturn_t begin_plain(enum sym s, int device_query)
{
    enter(s, device_query);
    return g_refcount ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

struct dev_ref {
    unsigned gpu;
    int is_mig;
    const struct gi_cfg *gi; /* MIG handles only */
};

/* What kind of handle a call accepts. */
enum handle_use {
    PHYS_ONLY, /* MIG handle -> NOT_SUPPORTED */
    ANY,       /* physical or MIG */
    MIG_ONLY   /* physical handle -> NOT_SUPPORTED */
};

static nvmlReturn_t resolve(nvmlDevice_t h, struct dev_ref *r)
{
    uintptr_t p = (uintptr_t)h;
    uintptr_t base = (uintptr_t)g_phys;
    if (p >= base && p < base + sizeof g_phys) {
        if ((p - base) % sizeof g_phys[0])
            return NVML_ERROR_INVALID_ARGUMENT;
        r->gpu = (unsigned)((p - base) / sizeof g_phys[0]);
        r->is_mig = 0;
        r->gi = NULL;
    } else {
        base = (uintptr_t)g_mig_handles;
        if (p < base || p >= base + sizeof g_mig_handles ||
            (p - base) % sizeof g_mig_handles[0][0])
            return NVML_ERROR_INVALID_ARGUMENT;
        size_t idx = (p - base) / sizeof g_mig_handles[0][0];
        r->gpu = (unsigned)(idx / MAX_GI_ID);
        r->is_mig = 1;
        if (r->gpu >= g_env.gpu_count)
            return NVML_ERROR_INVALID_ARGUMENT;
        r->gi = find_gi(r->gpu, (unsigned)(idx % MAX_GI_ID));
        if (!r->gi)
            return NVML_ERROR_INVALID_ARGUMENT; /* instance gone */
    }
    if (r->gpu >= g_env.gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gpu_is_lost(r->gpu))
        return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}

/* Enter a call on a device handle; the lock is held on return. */
static nvmlReturn_t begin_dev_fv(enum sym s, nvmlDevice_t h, struct dev_ref *r,
                                 enum handle_use use, int key,
                                 const nvmlFieldValue_t *fv, int n_fv)
{
    enter_fv(s, 1, fv, n_fv);
    if (!g_refcount)
        return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t rc = resolve(h, r);
    if (rc != NVML_SUCCESS)
        return rc;
    if ((use == PHYS_ONLY && r->is_mig) || (use == MIG_ONLY && !r->is_mig))
        return NVML_ERROR_NOT_SUPPORTED;
    if (key_not_supported(r->gpu, key))
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

static nvmlReturn_t begin_dev(enum sym s, nvmlDevice_t h, struct dev_ref *r,
                              enum handle_use use, int key)
{
    return begin_dev_fv(s, h, r, use, key, NULL, 0);
}

static nvmlReturn_t copy_str(char *buf, unsigned len, const char *s)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(s);
    if ((size_t)len < n + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, n + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Event sets: XIDs and other NVML events                              */
/* ------------------------------------------------------------------ */

/*
 * nvmlEventSetCreate / nvmlDeviceRegisterEvents / nvmlEventSetWait_v2 /
 * nvmlEventSetFree and nvmlDeviceGetSupportedEventTypes. Events come only from
 * the test: fake_nvml_inject_event() (FakeNvml.inject_xid) queues one in every
 * live set registered for that GPU and type and wakes blocked waiters; the
 * FAKE_NVML_XIDS script is queued in the first set of a session that registers
 * XidCriticalError on the GPU. A set lives in one NVML session: when the init
 * refcount drops to 0 every set is gone (waiters wake with UNINITIALIZED, later
 * calls on the old handle answer INVALID_ARGUMENT). Handles are ids, never
 * reused, so a stale handle cannot alias a new set. g_lock guards everything;
 * waiters sleep on g_event_cond with it released.
 */

#define NVML_EVENT_TYPE_XID 0x8ull
#define DEFAULT_EVENT_TYPES 0xff9full /* a real H100, driver 580 */
#define MAX_EVENT_SETS 16u
#define EVENT_QUEUE_LEN 256u
#define EVENT_SET_ID_BASE 0x5e7000000000ull
#define MAX_XID_SCRIPT 16u
#define FAKE_NVML_RC_TIMEOUT 10  /* NVML_ERROR_TIMEOUT */
#define FAKE_NVML_RC_MEMORY 20   /* NVML_ERROR_MEMORY */

typedef struct fake_event_set *nvmlEventSet_t; /* opaque id */

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

struct fake_event {
    unsigned gpu;
    unsigned long long type;
    unsigned long long data;
};

struct event_set_slot {
    int used;
    unsigned long long id;
    unsigned long long mask[MAX_GPUS]; /* registered event types per GPU */
    struct fake_event q[EVENT_QUEUE_LEN];
    unsigned head, n;
};

static struct event_set_slot g_event_sets[MAX_EVENT_SETS];
static unsigned long long g_event_serial;
static long long g_event_types_ovr[MAX_GPUS]; /* -1: DEFAULT_EVENT_TYPES */
static unsigned g_xid_script[MAX_GPUS][MAX_XID_SCRIPT];
static unsigned g_xid_script_n[MAX_GPUS];
static unsigned char g_xid_script_sent[MAX_GPUS];
static int g_xid_script_armed;
static pthread_cond_t g_event_cond;
static pthread_once_t g_event_once = PTHREAD_ONCE_INIT;

static void event_cond_init(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g_event_cond, &attr);
    pthread_condattr_destroy(&attr);
    for (unsigned g = 0; g < MAX_GPUS; g++)
        g_event_types_ovr[g] = -1;
}

static void events_once(void)
{
    pthread_once(&g_event_once, event_cond_init);
}

/* Wake every waiter to re-check its set (g_lock held or not). */
static void events_wake(void)
{
    events_once();
    pthread_cond_broadcast(&g_event_cond);
}

/* The init refcount reached 0: every set dies with the session (g_lock held). */
static void events_session_end(void)
{
    for (unsigned k = 0; k < MAX_EVENT_SETS; k++)
        g_event_sets[k].used = 0;
    g_xid_script_armed = 0;
    events_wake();
}

/* Parse FAKE_NVML_XIDS ("IDX:XID,IDX:XID"); 0 ok, -1 bad (g_lock held). */
static int load_xid_script(void)
{
    memset(g_xid_script_n, 0, sizeof g_xid_script_n);
    memset(g_xid_script_sent, 0, sizeof g_xid_script_sent);
    g_xid_script_armed = 1;
    const char *s = getenv("FAKE_NVML_XIDS");
    if (!s)
        return 0;
    const char *p = skip_ws(s);
    while (*p) {
        unsigned long g, xid;
        const char *q = parse_uint(p, MAX_GPUS - 1, &g);
        if (!q || *(q = skip_ws(q)) != ':')
            goto bad;
        q = parse_uint(skip_ws(q + 1), 0xFFFFFFFFul, &xid);
        if (!q || g_xid_script_n[g] >= MAX_XID_SCRIPT)
            goto bad;
        g_xid_script[g][g_xid_script_n[g]++] = (unsigned)xid;
        p = skip_ws(q);
        if (*p == ',')
            p = skip_ws(p + 1);
        else if (*p)
            goto bad;
    }
    return 0;
bad:
    memset(g_xid_script_n, 0, sizeof g_xid_script_n);
    set_error("bad FAKE_NVML_XIDS=%s (expected IDX:XID,IDX:XID, at most %u per GPU)", s,
              MAX_XID_SCRIPT);
    return -1;
}

/* fake_nvml_reset(): default event types, script re-read (g_lock held). */
static void events_reset(void)
{
    events_once();
    for (unsigned g = 0; g < MAX_GPUS; g++)
        g_event_types_ovr[g] = -1;
    load_xid_script();
}

static unsigned long long supported_event_types(unsigned g)
{
    return g_event_types_ovr[g] >= 0 ? (unsigned long long)g_event_types_ovr[g]
                                     : DEFAULT_EVENT_TYPES;
}

static struct event_set_slot *find_event_set(nvmlEventSet_t set)
{
    unsigned long long id = (unsigned long long)(uintptr_t)set;
    if (!id)
        return NULL;
    for (unsigned k = 0; k < MAX_EVENT_SETS; k++)
        if (g_event_sets[k].used && g_event_sets[k].id == id)
            return &g_event_sets[k];
    return NULL;
}

/* Queue one event in set s; a full queue drops it (g_lock held). */
static void event_push(struct event_set_slot *s, unsigned g, unsigned long long type,
                       unsigned long long data)
{
    if (s->n >= EVENT_QUEUE_LEN)
        return;
    struct fake_event *e = &s->q[(s->head + s->n) % EVENT_QUEUE_LEN];
    e->gpu = g;
    e->type = type;
    e->data = data;
    s->n++;
}

/* Queue in every live set registered for (g, type); how many (g_lock held). */
static unsigned event_broadcast(unsigned g, unsigned long long type, unsigned long long data)
{
    unsigned sets = 0;
    for (unsigned k = 0; k < MAX_EVENT_SETS; k++) {
        struct event_set_slot *s = &g_event_sets[k];
        if (s->used && (s->mask[g] & type)) {
            event_push(s, g, type, data);
            sets++;
        }
    }
    if (sets)
        events_wake();
    return sets;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    events_once();
    enter(SYM_nvmlEventSetCreate, 0);
    if (!g_refcount)
        return leave(NVML_ERROR_UNINITIALIZED);
    if (!set)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned k = 0; k < MAX_EVENT_SETS; k++) {
        struct event_set_slot *s = &g_event_sets[k];
        if (s->used)
            continue;
        memset(s, 0, sizeof *s);
        s->used = 1;
        s->id = EVENT_SET_ID_BASE + ++g_event_serial;
        *set = (nvmlEventSet_t)(uintptr_t)s->id;
        return leave(NVML_SUCCESS);
    }
    return leave(FAKE_NVML_RC_MEMORY);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    events_once();
    enter(SYM_nvmlEventSetFree, 0);
    if (!g_refcount)
        return leave(NVML_ERROR_UNINITIALIZED);
    struct event_set_slot *s = find_event_set(set);
    if (!s)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    s->used = 0;
    events_wake(); /* a waiter on it answers INVALID_ARGUMENT */
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                              unsigned long long *eventTypes)
{
    events_once();
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetSupportedEventTypes, device, &r,
                                PHYS_ONLY, KEY_NONE);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!eventTypes)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned long long types = supported_event_types(r.gpu);
    if (!types)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *eventTypes = types;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set)
{
    events_once();
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceRegisterEvents, device, &r, PHYS_ONLY,
                                KEY_NONE);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    struct event_set_slot *s = find_event_set(set);
    if (!s || !eventTypes)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (eventTypes & ~supported_event_types(r.gpu))
        return leave(NVML_ERROR_NOT_SUPPORTED);
    s->mask[r.gpu] |= eventTypes;
    if (eventTypes & NVML_EVENT_TYPE_XID) {
        if (!g_xid_script_armed)
            load_xid_script(); /* a bad variable was reported by reset() */
        if (!g_xid_script_sent[r.gpu]) {
            g_xid_script_sent[r.gpu] = 1;
            for (unsigned k = 0; k < g_xid_script_n[r.gpu]; k++)
                event_push(s, r.gpu, NVML_EVENT_TYPE_XID, g_xid_script[r.gpu][k]);
        }
    }
    return leave(NVML_SUCCESS);
}

/* A GPU registered in s is lost (g_lock held). */
static int event_set_gpu_lost(const struct event_set_slot *s)
{
    for (unsigned g = 0; g < g_env.gpu_count && g < MAX_GPUS; g++)
        if (s->mask[g] && gpu_is_lost(g))
            return 1;
    return 0;
}

/* One answer for a waiter, or -1 to keep waiting (g_lock held). */
static nvmlReturn_t event_poll(nvmlEventSet_t set, nvmlEventData_t *data)
{
    if (!g_refcount)
        return NVML_ERROR_UNINITIALIZED;
    struct event_set_slot *s = find_event_set(set);
    if (!s || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (s->n) {
        const struct fake_event *e = &s->q[s->head];
        s->head = (s->head + 1) % EVENT_QUEUE_LEN;
        s->n--;
        memset(data, 0, sizeof *data);
        data->device = &g_phys[e->gpu];
        data->eventType = e->type;
        data->eventData = e->data;
        data->gpuInstanceId = NO_ID;
        data->computeInstanceId = NO_ID;
        return NVML_SUCCESS;
    }
    if (event_set_gpu_lost(s))
        return NVML_ERROR_GPU_IS_LOST;
    return -1;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                 unsigned int timeoutms)
{
    events_once();
    enter(SYM_nvmlEventSetWait_v2, 0);
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += (time_t)(timeoutms / 1000u);
    deadline.tv_nsec += (long)(timeoutms % 1000u) * 1000000l;
    if (deadline.tv_nsec >= 1000000000l) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000l;
    }
    for (;;) {
        nvmlReturn_t rc = event_poll(set, data);
        if (rc != -1)
            return leave(rc);
        if (pthread_cond_timedwait(&g_event_cond, &g_lock, &deadline) == ETIMEDOUT) {
            rc = event_poll(set, data);
            return leave(rc != -1 ? rc : FAKE_NVML_RC_TIMEOUT);
        }
    }
}

/* Control: queue an event of `type` (one bit) with `data` in every live set
 * registered for it on GPU `index`, waking waiters. Returns the number of sets
 * (0: nobody listens, the event is dropped as the driver would), -1 on bad input. */
int fake_nvml_inject_event(unsigned index, unsigned long long type, unsigned long long data)
{
    events_once();
    pthread_mutex_lock(&g_lock);
    g_last_error[0] = '\0';
    int sets = -1;
    if (index >= MAX_GPUS)
        set_error("inject_event: GPU index %u out of range", index);
    else if (!type || (type & (type - 1)))
        set_error("inject_event: type 0x%llx is not one event type bit", type);
    else
        sets = (int)event_broadcast(index, type, data);
    pthread_mutex_unlock(&g_lock);
    return sets;
}

/* Control: the event types GPU `index` supports (< 0: the default 0xff9f; 0:
 * none, both GetSupportedEventTypes and RegisterEvents answer NOT_SUPPORTED). */
void fake_nvml_set_event_types(unsigned index, long long mask)
{
    events_once();
    pthread_mutex_lock(&g_lock);
    g_last_error[0] = '\0';
    if (index >= MAX_GPUS)
        set_error("set_event_types: GPU index %u out of range", index);
    else
        g_event_types_ovr[index] = mask < 0 ? -1 : mask;
    pthread_mutex_unlock(&g_lock);
}

/* Control: live event sets. */
unsigned fake_nvml_event_sets(void)
{
    pthread_mutex_lock(&g_lock);
    unsigned n = 0;
    for (unsigned k = 0; k < MAX_EVENT_SETS; k++)
        n += g_event_sets[k].used ? 1u : 0u;
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* Control: live sets registered for any of `types` on GPU `index`. */
unsigned fake_nvml_event_registrations(unsigned index, unsigned long long types)
{
    pthread_mutex_lock(&g_lock);
    unsigned n = 0;
    for (unsigned k = 0; index < MAX_GPUS && k < MAX_EVENT_SETS; k++)
        n += g_event_sets[k].used && (g_event_sets[k].mask[index] & types) ? 1u : 0u;
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* ------------------------------------------------------------------ */
/* Init, shutdown, errors, system                                      */
/* ------------------------------------------------------------------ */

static nvmlReturn_t do_init(void)
{
    if (g_refcount == 0 || !g_env_loaded) {
        g_last_error[0] = '\0';
        int bad = load_env();
        refresh_cost_profile();
        if (bad != 0)
            return NVML_ERROR_UNKNOWN;
    }
    if (g_env.init_error)
        return g_env.init_error;
    g_refcount++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    enter(SYM_nvmlInitWithFlags, 0);
    return leave(do_init());
}

nvmlReturn_t nvmlInit_v2(void)
{
    enter(SYM_nvmlInit_v2, 0);
    return leave(do_init());
}

nvmlReturn_t nvmlShutdown(void)
{
    enter(SYM_nvmlShutdown, 0);
    if (!g_refcount)
        return leave(NVML_ERROR_UNINITIALIZED);
    g_refcount--;
    if (!g_refcount)
        events_session_end();
    return leave(NVML_SUCCESS);
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    enter(SYM_nvmlErrorString, 0);
    leave(NVML_SUCCESS);
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 22: return "The requested vgpu operation is not available on target "
                    "device, because ECC is enabled";
    case 23: return "Insufficient resources";
    case 24: return "Frequency not supported";
    case 25: return "Argument version mismatch";
    case 26: return "Deprecated";
    case 27: return "Not Ready";
    case 28: return "GPU not found";
    case 29: return "Invalid state";
    case 30: return "Reset type not supported";
    case 999: return "Unknown Error";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    nvmlReturn_t rc = begin_plain(SYM_nvmlSystemGetDriverVersion, 0);
    if (rc == NVML_SUCCESS)
        rc = copy_str(version, length, g_env.driver_version);
    return leave(rc);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    nvmlReturn_t rc = begin_plain(SYM_nvmlSystemGetNVMLVersion, 0);
    if (rc == NVML_SUCCESS) {
        char buf[96];
        snprintf(buf, sizeof buf, "13.%s", g_env.driver_version);
        rc = copy_str(version, length, buf);
    }
    return leave(rc);
}

static nvmlReturn_t cuda_version(enum sym s, int *v)
{
    nvmlReturn_t rc = begin_plain(s, 0);
    if (rc == NVML_SUCCESS) {
        if (!v)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *v = 13000;
    }
    return leave(rc);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return cuda_version(SYM_nvmlSystemGetCudaDriverVersion, cudaDriverVersion);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return cuda_version(SYM_nvmlSystemGetCudaDriverVersion_v2,
                        cudaDriverVersion);
}

/* ------------------------------------------------------------------ */
/* Enumeration and identity                                            */
/* ------------------------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    nvmlReturn_t rc = begin_plain(SYM_nvmlDeviceGetCount_v2, 1);
    if (rc == NVML_SUCCESS && g_env.count_error)
        rc = (nvmlReturn_t)g_env.count_error;
    else if (rc == NVML_SUCCESS) {
        if (!deviceCount)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *deviceCount = g_env.gpu_count;
    }
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                           nvmlDevice_t *device)
{
    nvmlReturn_t rc = begin_plain(SYM_nvmlDeviceGetHandleByIndex_v2, 1);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!device || index >= g_env.gpu_count)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (gpu_is_lost(index))
        return leave(NVML_ERROR_GPU_IS_LOST);
    *device = &g_phys[index];
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    nvmlReturn_t rc = begin_plain(SYM_nvmlDeviceGetHandleByUUID, 1);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!uuid || !device)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    char buf[96];
    for (unsigned g = 0; g < g_env.gpu_count; g++) {
        nvmlDevice_t found = NULL;
        gpu_uuid(g, buf, sizeof buf);
        if (strcasecmp(buf, uuid) == 0)
            found = &g_phys[g];
        const struct mig_cfg *m = mig_of(g);
        for (unsigned k = 0; !found && m->enabled && k < m->n; k++) {
            mig_uuid(g, m->gi[k].gi_id, buf, sizeof buf);
            if (strcasecmp(buf, uuid) == 0)
                found = &g_mig_handles[g][m->gi[k].gi_id];
        }
        if (found) {
            if (gpu_is_lost(g))
                return leave(NVML_ERROR_GPU_IS_LOST);
            *device = found;
            return leave(NVML_SUCCESS);
        }
    }
    return leave(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId,
                                              nvmlDevice_t *device)
{
    nvmlReturn_t rc = begin_plain(SYM_nvmlDeviceGetHandleByPciBusId_v2, 1);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!pciBusId || !device)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned dom = 0, bus, dev, fn;
    char extra;
    if (sscanf(pciBusId, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &extra) != 4) {
        dom = 0;
        if (sscanf(pciBusId, "%x:%x.%x%c", &bus, &dev, &fn, &extra) != 3)
            return leave(NVML_ERROR_INVALID_ARGUMENT);
    }
    for (unsigned g = 0; g < g_env.gpu_count; g++) {
        if (dom == 0 && bus == gpu_bus(g) && dev == 0 && fn == 0) {
            if (gpu_is_lost(g))
                return leave(NVML_ERROR_GPU_IS_LOST);
            *device = &g_phys[g];
            return leave(NVML_SUCCESS);
        }
    }
    return leave(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    struct dev_ref r;
    nvmlReturn_t rc =
        begin_dev(SYM_nvmlDeviceGetIndex, device, &r, PHYS_ONLY, KEY_NONE);
    if (rc == NVML_SUCCESS) {
        if (!index)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *index = r.gpu;
    }
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name,
                               unsigned int length)
{
    struct dev_ref r;
    nvmlReturn_t rc =
        begin_dev(SYM_nvmlDeviceGetName, device, &r, ANY, KEY_NONE);
    if (rc == NVML_SUCCESS)
        rc = copy_str(name, length, gpu_name(r.gpu));
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid,
                               unsigned int length)
{
    struct dev_ref r;
    nvmlReturn_t rc =
        begin_dev(SYM_nvmlDeviceGetUUID, device, &r, ANY, KEY_NONE);
    if (rc == NVML_SUCCESS) {
        char buf[96];
        if (r.is_mig)
            mig_uuid(r.gpu, r.gi->gi_id, buf, sizeof buf);
        else
            gpu_uuid(r.gpu, buf, sizeof buf);
        rc = copy_str(uuid, length, buf);
    }
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial,
                                 unsigned int length)
{
    struct dev_ref r;
    nvmlReturn_t rc =
        begin_dev(SYM_nvmlDeviceGetSerial, device, &r, PHYS_ONLY, KEY_SERIAL);
    if (rc == NVML_SUCCESS) {
        char buf[32];
        snprintf(buf, sizeof buf, "165092400%04u", r.gpu);
        rc = copy_str(serial, length, buf);
    }
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version,
                                       unsigned int length)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetVbiosVersion, device, &r,
                                PHYS_ONLY, KEY_VBIOS);
    if (rc == NVML_SUCCESS)
        rc = copy_str(version, length, VBIOS_VERSION);
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetPciInfo_v3, device, &r,
                                PHYS_ONLY, KEY_NONE);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!pci)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0",
             gpu_bus(r.gpu));
    /* Same text cut to the 16-byte legacy field (no terminator). */
    memcpy(pci->busIdLegacy, pci->busId, sizeof pci->busIdLegacy);
    pci->domain = 0;
    pci->bus = gpu_bus(r.gpu);
    pci->device = 0;
    pci->pciDeviceId = 0x233010DEu;
    pci->pciSubSystemId = 0x16C110DEu;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device,
                                      unsigned int *minorNumber)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetMinorNumber, device, &r,
                                PHYS_ONLY, KEY_MINOR);
    if (rc == NVML_SUCCESS) {
        if (!minorNumber)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *minorNumber = g_env.minor[r.gpu] >= 0
                               ? (unsigned)g_env.minor[r.gpu]
                               : r.gpu;
    }
    return leave(rc);
}

/* ------------------------------------------------------------------ */
/* Utilization, memory, power, clocks, temperature                     */
/* ------------------------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                           nvmlUtilization_t *utilization)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetUtilizationRates, device, &r,
                                PHYS_ONLY, KEY_UTIL);
    if (rc == NVML_SUCCESS) {
        if (!utilization) {
            rc = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            unsigned gpu = 10u + 10u * r.gpu;
            utilization->gpu = gpu > 100u ? 100u : gpu;
            utilization->memory = 5u + r.gpu;
        }
    }
    return leave(rc);
}

static nvmlReturn_t codec_util(enum sym s, int key, unsigned base,
                               nvmlDevice_t device, unsigned int *util,
                               unsigned int *period)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(s, device, &r, PHYS_ONLY, key);
    if (rc == NVML_SUCCESS) {
        if (!util || !period) {
            rc = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            *util = base + r.gpu;
            *period = 167000u;
        }
    }
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device,
                                             unsigned int *utilization,
                                             unsigned int *samplingPeriodUs)
{
    return codec_util(SYM_nvmlDeviceGetEncoderUtilization, KEY_ENC, 1, device,
                      utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device,
                                             unsigned int *utilization,
                                             unsigned int *samplingPeriodUs)
{
    return codec_util(SYM_nvmlDeviceGetDecoderUtilization, KEY_DEC, 2, device,
                      utilization, samplingPeriodUs);
}

struct mem_values {
    unsigned long long total, reserved, used, free;
};

/* FAKE_NVML_MEMORY_SLACK_BYTES: bytes (< 1 MiB) added to the total and to the used memory of
 * every GPU and instance, so that byte counts are not whole MiB (as on real boards) while
 * the MiB figures stay the same. Read at each call. */
static unsigned long long memory_slack(void)
{
    const char *s = getenv("FAKE_NVML_MEMORY_SLACK_BYTES");
    unsigned long long slack = s ? strtoull(s, NULL, 10) : 0ull;
    return slack < MIB ? slack : 0ull;
}

static void memory_of(const struct dev_ref *r, struct mem_values *m)
{
    unsigned long long slack = memory_slack();
    if (r->is_mig) {
        m->total = r->gi->profile->memory_mb * MIB + slack;
        m->reserved = 0;
        m->used = 100ull * r->gi->gi_id * MIB + slack;
    } else {
        m->total = GPU_MEMORY_TOTAL + slack;
        m->reserved = GPU_MEMORY_RESERVED;
        m->used = 1024ull * (r->gpu + 1ull) * MIB + slack;
    }
    m->free = m->total - m->reserved - m->used;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct dev_ref r;
    nvmlReturn_t rc =
        begin_dev(SYM_nvmlDeviceGetMemoryInfo, device, &r, ANY, KEY_MEMORY);
    if (rc == NVML_SUCCESS) {
        if (!memory) {
            rc = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            struct mem_values m;
            memory_of(&r, &m);
            memory->total = m.total;
            memory->free = m.free;
            memory->used = m.used + m.reserved; /* v1 counts reserved */
        }
    }
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                        nvmlMemory_v2_t *memory)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetMemoryInfo_v2, device, &r,
                                ANY, KEY_MEMORY_V2);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!memory)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != NVML_MEMORY_V2_VERSION)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    struct mem_values m;
    memory_of(&r, &m);
    memory->total = m.total;
    memory->reserved = m.reserved;
    memory->free = m.free;
    memory->used = m.used;
    return leave(NVML_SUCCESS);
}

/* FAKE_NVML_POWER_SWING_MW: every other power read of a GPU draws that much more (a
 * power trace that changes over time, above the idle baseline every second read). Read at
 * each call, so a subprocess test sets it in its environment. */
static unsigned long long g_power_reads[MAX_GPUS];

static unsigned power_swing_mw(unsigned gpu)
{
    const char *s = getenv("FAKE_NVML_POWER_SWING_MW");
    unsigned long long n = g_power_reads[gpu]++;
    return s && (n & 1u) ? (unsigned)strtoul(s, NULL, 10) : 0u;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetPowerUsage, device, &r,
                                PHYS_ONLY, KEY_POWER);
    if (rc == NVML_SUCCESS) {
        if (!power)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *power = 16365u + 1000u * r.gpu + power_swing_mw(r.gpu);
    }
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                 unsigned long long *energy)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetTotalEnergyConsumption,
                                device, &r, PHYS_ONLY, KEY_ENERGY);
    if (rc == NVML_SUCCESS) {
        if (!energy) {
            rc = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            *energy = 1000000ull + 1000ull * r.gpu +
                      ENERGY_STEP_MJ * g_energy_reads[r.gpu];
            g_energy_reads[r.gpu]++;
        }
    }
    return leave(rc);
}

static nvmlReturn_t clock_query(enum sym s, const unsigned table[4],
                                int per_gpu, nvmlDevice_t device,
                                unsigned type, unsigned int *clock)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(s, device, &r, PHYS_ONLY, KEY_CLOCK);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!clock || type > 3)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *clock = table[type] + (per_gpu && type <= 1 ? r.gpu : 0u);
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type,
                                    unsigned int *clock)
{
    static const unsigned current[4] = {1410, 1410, 1593, 1275};
    return clock_query(SYM_nvmlDeviceGetClockInfo, current, 1, device, type,
                       clock);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, unsigned int type,
                                       unsigned int *clock)
{
    static const unsigned maximum[4] = {1980, 1980, 2619, 1755};
    return clock_query(SYM_nvmlDeviceGetMaxClockInfo, maximum, 0, device, type,
                       clock);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                      unsigned int sensorType,
                                      unsigned int *temp)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetTemperature, device, &r,
                                PHYS_ONLY, KEY_TEMP);
    if (rc == NVML_SUCCESS) {
        if (!temp || sensorType != 0)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *temp = 30u + r.gpu;
    }
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device,
                                       nvmlTemperature_v1_t *temperature)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetTemperatureV, device, &r,
                                PHYS_ONLY, KEY_TEMP);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!temperature)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (temperature->version != NVML_TEMPERATURE_V1_VERSION)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (temperature->sensorType != 0)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    temperature->temperature = 30 + (int)r.gpu;
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------ */
/* Field values, PCIe, processes                                       */
/* ------------------------------------------------------------------ */

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000ll + ts.tv_nsec / 1000;
}

/*
 * NVLink field values of GPU g (18 links, as an H100 SXM). Error totals: 38 →
 * 10+g, 45 → 20+g, 52 → 30+g, 59 → 40+g. Data throughput counters (KiB since
 * the library loaded, scope = link 0..17 or 0xFFFFFFFF for all links): link l
 * carries RX 1+g+l and TX 2·(1+g+l) KiB per microsecond of the call's
 * timestamp, so two readings give an exact steady rate. Key `nvlink`: each of
 * these fields answers NOT_SUPPORTED (a PCIe GPU without NVLink).
 */
#define FAKE_NVLINK_LINKS 18u
#define NVLINK_ALL_LINKS 0xFFFFFFFFu

static long long nvlink_epoch_us(long long ts)
{
    static long long epoch; /* g_lock held */
    if (!epoch)
        epoch = ts - 1000000; /* a second of traffic before the first reading */
    return epoch;
}

static int nvlink_field(unsigned g, nvmlFieldValue_t *v, long long ts)
{
    unsigned long long per_us;
    switch (v->fieldId) {
    case NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL:
    case NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL:
    case NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL:
    case NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL:
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        v->value.ullVal = 10ull * (1 + (v->fieldId - 38u) / 7u) + g;
        break;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
        if (v->scopeId == NVLINK_ALL_LINKS)
            per_us = FAKE_NVLINK_LINKS * (1ull + g) +
                     FAKE_NVLINK_LINKS * (FAKE_NVLINK_LINKS - 1) / 2;
        else if (v->scopeId < FAKE_NVLINK_LINKS)
            per_us = 1ull + g + v->scopeId;
        else {
            v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
            return 1;
        }
        if (v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX)
            per_us *= 2;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        v->value.ullVal = per_us * (unsigned long long)(ts - nvlink_epoch_us(ts));
        break;
    default:
        return 0;
    }
    if (key_not_supported(g, KEY_NVLINK)) {
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        memset(&v->value, 0, sizeof v->value);
    }
    return 1;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                      nvmlFieldValue_t *values)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev_fv(SYM_nvmlDeviceGetFieldValues, device, &r,
                                   PHYS_ONLY, KEY_NONE, values, valuesCount);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!values || valuesCount <= 0)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    long long ts = now_us();
    for (int k = 0; k < valuesCount; k++) {
        nvmlFieldValue_t *v = &values[k];
        memset(&v->value, 0, sizeof v->value);
        v->timestamp = ts;
        v->latencyUsec = 0;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->nvmlReturn = NVML_SUCCESS;
        switch (v->fieldId) {
        case NVML_FI_DEV_MEMORY_TEMP:
            if (key_not_supported(r.gpu, KEY_MEMTEMP))
                v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            else
                v->value.uiVal = 40u + r.gpu;
            break;
        case NVML_FI_DEV_ECC_SBE_VOL_TOTAL:
        case NVML_FI_DEV_ECC_DBE_VOL_TOTAL:
        case NVML_FI_DEV_ECC_SBE_AGG_TOTAL:
        case NVML_FI_DEV_ECC_DBE_AGG_TOTAL:
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            v->value.ullVal = r.gpu;
            break;
        case NVML_FI_DEV_REMAPPED_COR:
        case NVML_FI_DEV_REMAPPED_UNC:
        case NVML_FI_DEV_REMAPPED_FAILURE:
            v->value.uiVal = 0;
            break;
        default:
            if (nvlink_field(r.gpu, v, ts))
                break;
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            break;
        }
    }
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device,
                                            unsigned int *value)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetPcieReplayCounter, device,
                                &r, PHYS_ONLY, KEY_PCIE_REPLAY);
    if (rc == NVML_SUCCESS) {
        if (!value)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *value = r.gpu;
    }
    return leave(rc);
}

/* ------------------------------------------------------------------ */
/* Throttling, retired pages, licence, power limits, fan, pstate,     */
/* inforom, brand, P2P                                                 */
/* ------------------------------------------------------------------ */

/* nvmlDeviceGetCurrentClocksEventReasons overrides (fake_nvml_set_clock_events);
 * cleared by reset. */
static unsigned char g_clock_events_set[MAX_GPUS];
static unsigned long long g_clock_events_ovr[MAX_GPUS];

/* Policies NVML_PERF_POLICY_POWER (0) … RELIABILITY (5), TOTAL_APP_CLOCKS (10),
 * TOTAL_BASE_CLOCKS (11): violationTime = (policy+1)·10^6 + 1000·g ns. */
nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t device,
                                          unsigned int perfPolicyType,
                                          nvmlViolationTime_t *violTime)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetViolationStatus, device, &r,
                                PHYS_ONLY, KEY_VIOLATION);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!violTime || (perfPolicyType > 5 && perfPolicyType != 10 &&
                      perfPolicyType != 11))
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    violTime->referenceTime = (unsigned long long)now_us();
    violTime->violationTime =
        1000000ull * (perfPolicyType + 1ull) + 1000ull * r.gpu;
    return leave(NVML_SUCCESS);
}

/* Even GPUs 0x1 (GpuIdle), odd ones 0x4 (SwPowerCap), unless overridden. */
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(
    nvmlDevice_t device, unsigned long long *clocksEventReasons)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetCurrentClocksEventReasons,
                                device, &r, PHYS_ONLY, KEY_CLOCK_EVENTS);
    if (rc == NVML_SUCCESS) {
        if (!clocksEventReasons)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *clocksEventReasons = g_clock_events_set[r.gpu]
                                      ? g_clock_events_ovr[r.gpu]
                                      : (r.gpu % 2u ? 0x4ull : 0x1ull);
    }
    return leave(rc);
}

/* Cause 0 (multiple single-bit ECC errors): g+1 pages; cause 1 (double-bit):
 * g pages. Addresses 0x1000·(k+1) + cause. Too small a count (NULL buffer
 * included) → INSUFFICIENT_SIZE with the count, as the driver answers. */
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, unsigned int cause,
                                       unsigned int *pageCount,
                                       unsigned long long *addresses)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetRetiredPages, device, &r,
                                PHYS_ONLY, KEY_RETIRED);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!pageCount || cause > 1)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = cause == 0 ? r.gpu + 1u : r.gpu;
    if (*pageCount < n || (n && !addresses)) {
        *pageCount = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned k = 0; k < n; k++)
        addresses[k] = 0x1000ull * (k + 1ull) + cause;
    *pageCount = n;
    return leave(NVML_SUCCESS);
}

/* Pending retirement: 1 on odd GPUs, 0 on even ones. */
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                    unsigned int *isPending)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetRetiredPagesPendingStatus,
                                device, &r, PHYS_ONLY, KEY_RETIRED);
    if (rc == NVML_SUCCESS) {
        if (!isPending)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *isPending = r.gpu % 2u;
    }
    return leave(rc);
}

/* GPU g: g%3 == 0 the vGPU feature licensed, 1 listed but unlicensed, 2 no
 * vGPU licensing (isGridLicenseSupported 0). Key `license`: NOT_SUPPORTED. */
nvmlReturn_t nvmlDeviceGetGridLicensableFeatures_v4(
    nvmlDevice_t device, nvmlGridLicensableFeatures_t *features)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetGridLicensableFeatures_v4,
                                device, &r, PHYS_ONLY, KEY_LICENSE);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!features)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    memset(features, 0, sizeof *features);
    if (r.gpu % 3u == 2u)
        return leave(NVML_SUCCESS);
    features->isGridLicenseSupported = 1;
    features->licensableFeaturesCount = 1;
    nvmlGridLicensableFeature_t *f = &features->gridLicensableFeatures[0];
    f->featureCode = 1; /* NVML_GRID_LICENSE_FEATURE_CODE_VGPU */
    f->featureState = r.gpu % 3u == 0u ? 1u : 0u;
    f->featureEnabled = 1;
    snprintf(f->licenseInfo, sizeof f->licenseInfo, "%s", "NVIDIA-vComputeServer,9.0");
    snprintf(f->productName, sizeof f->productName, "%s",
             "NVIDIA Virtual Compute Server");
    f->licenseExpiry.status = 2; /* NVML_GRID_LICENSE_EXPIRY_PERMANENT */
    return leave(NVML_SUCCESS);
}

/* Power limits in mW: requested 699500 - 100000·g, enforced the same,
 * constraints 200000..700000, default 700000. Key `power_limit`: all four. */
static nvmlReturn_t power_limit(enum sym s, nvmlDevice_t device, unsigned which,
                                unsigned int *a, unsigned int *b)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(s, device, &r, PHYS_ONLY, KEY_POWER_LIMIT);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!a || (which == 2 && !b))
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (which == 0) {
        *a = 699500u - 100000u * (r.gpu % 5u);
    } else if (which == 1) {
        *a = 700000u;
    } else {
        *a = 200000u;
        *b = 700000u;
    }
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device,
                                               unsigned int *limit)
{
    return power_limit(SYM_nvmlDeviceGetPowerManagementLimit, device, 0, limit,
                       NULL);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device,
                                             unsigned int *limit)
{
    return power_limit(SYM_nvmlDeviceGetEnforcedPowerLimit, device, 0, limit,
                       NULL);
}

nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device,
                                                      unsigned int *limit)
{
    return power_limit(SYM_nvmlDeviceGetPowerManagementDefaultLimit, device, 1,
                       limit, NULL);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(
    nvmlDevice_t device, unsigned int *minLimit, unsigned int *maxLimit)
{
    return power_limit(SYM_nvmlDeviceGetPowerManagementLimitConstraints, device,
                       2, minLimit, maxLimit);
}

/* Unsigned answers: fan 30+g %, pstate 0 (even) / 8 (odd), brand 14 NVIDIA
 * (even) / 2 Tesla (odd). */
static nvmlReturn_t uint_query(enum sym s, int key, nvmlDevice_t device,
                               unsigned int *out, unsigned even, unsigned odd,
                               unsigned per_gpu)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(s, device, &r, PHYS_ONLY, key);
    if (rc == NVML_SUCCESS) {
        if (!out)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *out = (r.gpu % 2u ? odd : even) + per_gpu * r.gpu;
    }
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    return uint_query(SYM_nvmlDeviceGetFanSpeed, KEY_FAN, device, speed, 30, 30,
                      1);
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device,
                                           unsigned int *pState)
{
    return uint_query(SYM_nvmlDeviceGetPerformanceState, KEY_PSTATE, device,
                      pState, 0, 8, 0);
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, unsigned int *type)
{
    return uint_query(SYM_nvmlDeviceGetBrand, KEY_BRAND, device, type, 14, 2, 0);
}

/* Objects NVML_INFOROM_OEM (0) "2.1", ECC (1) "7.16", POWER (2) "1.1"; DEN (3)
 * NOT_SUPPORTED; others INVALID_ARGUMENT. Image "G520.0200.00.05". */
nvmlReturn_t nvmlDeviceGetInforomVersion(nvmlDevice_t device, unsigned int object,
                                         char *version, unsigned int length)
{
    static const char *const versions[3] = {"2.1", "7.16", "1.1"};
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetInforomVersion, device, &r,
                                PHYS_ONLY, KEY_INFOROM);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (object == 3)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    if (object > 3)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    return leave(copy_str(version, length, versions[object]));
}

nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device,
                                              char *version, unsigned int length)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetInforomImageVersion, device, &r,
                                PHYS_ONLY, KEY_INFOROM);
    if (rc == NVML_SUCCESS)
        rc = copy_str(version, length, "G520.0200.00.05");
    return leave(rc);
}

/* Between two different GPUs: status OK (0) for every capability index 0..4
 * (READ, WRITE, NVLINK, ATOMICS, PCI), except NVLINK (2) when either GPU has
 * the `nvlink` key: NVML_P2P_STATUS_NOT_SUPPORTED (5). Key `p2p` on either GPU:
 * the call answers NOT_SUPPORTED. Same GPU or index > 4: INVALID_ARGUMENT. */
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                    unsigned int p2pIndex, unsigned int *p2pStatus)
{
    struct dev_ref r1, r2;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetP2PStatus, device1, &r1,
                                PHYS_ONLY, KEY_P2P);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    rc = resolve(device2, &r2);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (r2.is_mig)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    if (key_not_supported(r2.gpu, KEY_P2P))
        return leave(NVML_ERROR_NOT_SUPPORTED);
    if (!p2pStatus || r1.gpu == r2.gpu || p2pIndex > 4)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *p2pStatus = p2pIndex == 2 && (key_not_supported(r1.gpu, KEY_NVLINK) ||
                                   key_not_supported(r2.gpu, KEY_NVLINK))
                     ? 5u
                     : 0u;
    return leave(NVML_SUCCESS);
}

/* Control: GPU index's clock event reasons (mask >= 0), or the default (< 0). */
void fake_nvml_set_clock_events(unsigned index, long long mask)
{
    pthread_mutex_lock(&g_lock);
    g_last_error[0] = '\0';
    if (index >= MAX_GPUS) {
        snprintf(g_last_error, sizeof g_last_error,
                 "set_clock_events: GPU index %u out of range", index);
    } else {
        g_clock_events_set[index] = mask >= 0;
        g_clock_events_ovr[index] = mask >= 0 ? (unsigned long long)mask : 0;
    }
    pthread_mutex_unlock(&g_lock);
}

/*
 * A physical handle lists every process of its kind; in MIG mode with the GPU
 * instance it runs in (as NVML does for a privileged caller) unless hide_gi.
 * A MIG handle lists the processes of its GPU instance only.
 */
static nvmlReturn_t running_processes(enum sym s, unsigned kind,
                                      nvmlDevice_t device,
                                      unsigned int *infoCount,
                                      nvmlProcessInfo_v3_t *infos)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(s, device, &r, ANY,
                                kind == KIND_MPS ? KEY_MPS : KEY_PROCESSES);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!infoCount)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    const struct procs_cfg *pc = procs_of(r.gpu);
    int mig_on = mig_of(r.gpu)->enabled;
    nvmlProcessInfo_v3_t out[MAX_PROCS];
    unsigned n = 0;
    for (unsigned k = 0; k < pc->n; k++) {
        const struct proc_cfg *p = &pc->p[k];
        if (!(p->kinds & kind) || (r.is_mig && p->gi != r.gi->gi_id))
            continue;
        unsigned gi = r.is_mig || (mig_on && !p->hide_gi) ? p->gi : NO_ID;
        out[n].pid = p->pid;
        out[n].usedGpuMemory = p->used;
        out[n].gpuInstanceId = gi;
        out[n].computeInstanceId = gi == NO_ID ? NO_ID : 0u;
        n++;
    }
    if (*infoCount < n) {
        *infoCount = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    if (n && !infos)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (n)
        memcpy(infos, out, n * sizeof out[0]);
    *infoCount = n;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v3_t *infos)
{
    return running_processes(SYM_nvmlDeviceGetComputeRunningProcesses_v3,
                             KIND_COMPUTE, device, infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(
    nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v3_t *infos)
{
    return running_processes(SYM_nvmlDeviceGetGraphicsRunningProcesses_v3,
                             KIND_GRAPHICS, device, infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(
    nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v3_t *infos)
{
    return running_processes(SYM_nvmlDeviceGetMPSComputeRunningProcesses_v3,
                             KIND_MPS, device, infoCount, infos);
}

/* The v2 struct is laid out as v3 (pid, usedGpuMemory, gpuInstanceId,
 * computeInstanceId), as in nvml.h. */
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(
    nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v3_t *infos)
{
    return running_processes(SYM_nvmlDeviceGetMPSComputeRunningProcesses_v2,
                             KIND_MPS, device, infoCount, infos);
}

/*
 * Every call takes a fresh sample of each process with an SM percent; the
 * k-th has timestamp base - k, and base moves past every earlier stamp, so a
 * caller that passes its newest stamp back gets the new samples only.
 * No sample newer than lastSeenTimeStamp: NOT_FOUND, as the driver answers.
 */
nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
    unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetProcessUtilization, device,
                                &r, PHYS_ONLY, KEY_PROC_UTIL);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!processSamplesCount)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (mig_of(r.gpu)->enabled)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    g_pu_last_seen[r.gpu] = lastSeenTimeStamp;
    unsigned long long now = (unsigned long long)now_us();
    unsigned long long base = g_pu_clock + MAX_PROCS + 1u;
    g_pu_clock = base = now > base ? now : base;
    const struct procs_cfg *pc = procs_of(r.gpu);
    nvmlProcessUtilizationSample_t out[MAX_PROCS];
    unsigned n = 0;
    for (unsigned k = 0; k < pc->n; k++) {
        const struct proc_cfg *p = &pc->p[k];
        unsigned long long ts = base - k;
        if (p->sm < 0 || ts <= lastSeenTimeStamp)
            continue;
        memset(&out[n], 0, sizeof out[n]);
        out[n].pid = p->pid;
        out[n].timeStamp = ts;
        out[n].smUtil = (unsigned)p->sm;
        out[n].memUtil = p->mem < 0 ? 0u : (unsigned)p->mem;
        n++;
    }
    if (n == 0)
        return leave(NVML_ERROR_NOT_FOUND);
    if (!utilization || *processSamplesCount < n) {
        *processSamplesCount = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    memcpy(utilization, out, n * sizeof out[0]);
    *processSamplesCount = n;
    g_pu_newest[r.gpu] = out[0].timeStamp; /* stamps fall with k */
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------ */
/* MIG                                                                 */
/* ------------------------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device,
                                  unsigned int *currentMode,
                                  unsigned int *pendingMode)
{
    struct dev_ref r;
    nvmlReturn_t rc =
        begin_dev(SYM_nvmlDeviceGetMigMode, device, &r, PHYS_ONLY, KEY_NONE);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!currentMode || !pendingMode)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned on = mig_of(r.gpu)->enabled ? 1u : 0u;
    *currentMode = on;
    *pendingMode = on;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device,
                                         unsigned int *isMigDevice)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceIsMigDeviceHandle, device, &r,
                                ANY, KEY_NONE);
    if (rc == NVML_SUCCESS) {
        if (!isMigDevice)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *isMigDevice = r.is_mig ? 1u : 0u;
    }
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device,
                                            unsigned int *count)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetMaxMigDeviceCount, device, &r,
                                PHYS_ONLY, KEY_NONE);
    if (rc == NVML_SUCCESS) {
        if (!count)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *count = mig_of(r.gpu)->enabled ? MAX_MIG_INSTANCES : 0u;
    }
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                 unsigned int index,
                                                 nvmlDevice_t *migDevice)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetMigDeviceHandleByIndex,
                                device, &r, ANY, KEY_NONE);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (r.is_mig || !migDevice)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    const struct mig_cfg *m = mig_of(r.gpu);
    if (!m->enabled || index >= m->n)
        return leave(NVML_ERROR_NOT_FOUND);
    *migDevice = &g_mig_handles[r.gpu][m->gi[index].gi_id];
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetGpuInstanceId, device, &r,
                                MIG_ONLY, KEY_NONE);
    if (rc == NVML_SUCCESS) {
        if (!id)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *id = r.gi->gi_id;
    }
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device,
                                            unsigned int *id)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetComputeInstanceId, device, &r,
                                MIG_ONLY, KEY_NONE);
    if (rc == NVML_SUCCESS) {
        if (!id)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *id = 0;
    }
    return leave(rc);
}

nvmlReturn_t
nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                             nvmlDevice_t *device)
{
    struct dev_ref r;
    nvmlReturn_t rc =
        begin_dev(SYM_nvmlDeviceGetDeviceHandleFromMigDeviceHandle, migDevice,
                  &r, MIG_ONLY, KEY_NONE);
    if (rc == NVML_SUCCESS) {
        if (!device)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *device = &g_phys[r.gpu];
    }
    return leave(rc);
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device,
                                        nvmlDeviceAttributes_t *attributes)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetAttributes_v2, device, &r,
                                MIG_ONLY, KEY_NONE);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!attributes)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    const struct gi_profile *p = r.gi->profile;
    memset(attributes, 0, sizeof *attributes);
    attributes->multiprocessorCount = p->sms;
    attributes->sharedCopyEngineCount = p->copy_engines;
    attributes->sharedDecoderCount = p->decoders;
    attributes->sharedEncoderCount = 0;
    attributes->sharedJpegCount = p->jpegs;
    attributes->sharedOfaCount = p->ofas;
    attributes->gpuInstanceSliceCount = p->slices;
    attributes->computeInstanceSliceCount = p->slices;
    attributes->memorySizeMB = p->memory_mb;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t *gpuInstance)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetGpuInstanceById, device, &r,
                                PHYS_ONLY, KEY_NONE);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!gpuInstance)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!mig_of(r.gpu)->enabled)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    if (id >= MAX_GI_ID || !find_gi(r.gpu, id))
        return leave(NVML_ERROR_NOT_FOUND);
    *gpuInstance = &g_gi_handles[r.gpu][id];
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance,
                                    nvmlGpuInstanceInfo_t *info)
{
    enter(SYM_nvmlGpuInstanceGetInfo, 1);
    if (!g_refcount)
        return leave(NVML_ERROR_UNINITIALIZED);
    uintptr_t p = (uintptr_t)gpuInstance;
    uintptr_t base = (uintptr_t)g_gi_handles;
    if (p < base || p >= base + sizeof g_gi_handles ||
        (p - base) % sizeof g_gi_handles[0][0])
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    size_t idx = (p - base) / sizeof g_gi_handles[0][0];
    unsigned g = (unsigned)(idx / MAX_GI_ID);
    const struct gi_cfg *gi =
        g < g_env.gpu_count ? find_gi(g, (unsigned)(idx % MAX_GI_ID)) : NULL;
    if (!gi || !info)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (gpu_is_lost(g))
        return leave(NVML_ERROR_GPU_IS_LOST);
    memset(info, 0, sizeof *info);
    info->device = &g_phys[g];
    info->id = gi->gi_id;
    info->profileId = gi->profile->id;
    info->placement.start = gi->start;
    info->placement.size = gi->profile->slices;
    return leave(NVML_SUCCESS);
}

static void fill_profile_v1(const struct gi_profile *p,
                            nvmlGpuInstanceProfileInfo_t *info)
{
    memset(info, 0, sizeof *info);
    info->id = p->id;
    info->isP2pSupported = 0;
    info->sliceCount = p->slices;
    info->instanceCount = p->instance_count;
    info->multiprocessorCount = p->sms;
    info->copyEngineCount = p->copy_engines;
    info->decoderCount = p->decoders;
    info->encoderCount = 0;
    info->jpegCount = p->jpegs;
    info->ofaCount = p->ofas;
    info->memorySizeMB = p->memory_mb;
}

static void fill_profile_v2(const struct gi_profile *p,
                            nvmlGpuInstanceProfileInfo_v2_t *info)
{
    nvmlGpuInstanceProfileInfo_t v1;
    fill_profile_v1(p, &v1);
    unsigned version = info->version;
    memset(info, 0, sizeof *info);
    info->version = version;
    info->id = v1.id;
    info->isP2pSupported = v1.isP2pSupported;
    info->sliceCount = v1.sliceCount;
    info->instanceCount = v1.instanceCount;
    info->multiprocessorCount = v1.multiprocessorCount;
    info->copyEngineCount = v1.copyEngineCount;
    info->decoderCount = v1.decoderCount;
    info->encoderCount = v1.encoderCount;
    info->jpegCount = v1.jpegCount;
    info->ofaCount = v1.ofaCount;
    info->memorySizeMB = v1.memorySizeMB;
    snprintf(info->name, sizeof info->name, "%s", p->name);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(
    nvmlDevice_t device, unsigned int profile,
    nvmlGpuInstanceProfileInfo_t *info)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlDeviceGetGpuInstanceProfileInfo, device,
                                &r, PHYS_ONLY, KEY_NONE);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!info)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    const struct gi_profile *p = profile_by_enum(profile);
    if (!mig_of(r.gpu)->enabled || !p)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    fill_profile_v1(p, info);
    return leave(NVML_SUCCESS);
}

static nvmlReturn_t profile_info_v2(enum sym s, nvmlDevice_t device,
                                    const struct gi_profile *p,
                                    nvmlGpuInstanceProfileInfo_v2_t *info)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(s, device, &r, PHYS_ONLY, KEY_NONE);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!info)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (info->version != NVML_GI_PROFILE_INFO_V2_VERSION)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (!mig_of(r.gpu)->enabled || !p)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    fill_profile_v2(p, info);
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(
    nvmlDevice_t device, unsigned int profile,
    nvmlGpuInstanceProfileInfo_v2_t *info)
{
    return profile_info_v2(SYM_nvmlDeviceGetGpuInstanceProfileInfoV, device,
                           profile_by_enum(profile), info);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(
    nvmlDevice_t device, unsigned int profileId,
    nvmlGpuInstanceProfileInfo_v2_t *info)
{
    return profile_info_v2(SYM_nvmlDeviceGetGpuInstanceProfileInfoByIdV,
                           device, profile_by_id(profileId), info);
}

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device,
                                       nvmlGpmSupport_t *gpmSupport)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(SYM_nvmlGpmQueryDeviceSupport, device, &r,
                                ANY, KEY_NONE);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!gpmSupport)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    gpmSupport->isSupportedDevice = g_env.gpm[r.gpu];
    return leave(NVML_SUCCESS);
}

/* GPM samples: a metric needs two samples of the same GPU (or GPU instance), older first. */
#define GPM_METRICS_GET_VERSION 1u
#define GPM_METRIC_MAX 477u
#define GPM_SAMPLE_MAGIC 0x47504d53u

struct fake_gpm_sample {
    unsigned magic;
    int filled;
    unsigned gpu;
    int gi; /* -1: the whole GPU */
    unsigned long long seq;
};
typedef struct fake_gpm_sample *nvmlGpmSample_t;

typedef struct {
    const char *shortName;
    const char *longName;
    const char *unit;
} nvmlGpmMetricInfo_t;

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    nvmlGpmMetricInfo_t metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

static unsigned long long g_gpm_seq;

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample)
{
    enter(SYM_nvmlGpmSampleAlloc, 0);
    if (!g_refcount)
        return leave(NVML_ERROR_UNINITIALIZED);
    if (!sample)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    struct fake_gpm_sample *s = calloc(1, sizeof *s);
    if (!s)
        return leave(NVML_ERROR_UNKNOWN);
    s->magic = GPM_SAMPLE_MAGIC;
    s->gi = -1;
    *sample = s;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample)
{
    enter(SYM_nvmlGpmSampleFree, 0);
    if (!sample || sample->magic != GPM_SAMPLE_MAGIC)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    sample->magic = 0;
    free(sample);
    return leave(NVML_SUCCESS);
}

static nvmlReturn_t gpm_take(enum sym s, nvmlDevice_t device, int gi,
                             nvmlGpmSample_t sample)
{
    struct dev_ref r;
    nvmlReturn_t rc = begin_dev(s, device, &r, PHYS_ONLY, KEY_NONE);
    if (rc != NVML_SUCCESS)
        return leave(rc);
    if (!sample || sample->magic != GPM_SAMPLE_MAGIC)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!g_env.gpm[r.gpu])
        return leave(NVML_ERROR_NOT_SUPPORTED);
    if (gi >= 0 && !find_gi(r.gpu, (unsigned)gi))
        return leave(NVML_ERROR_NOT_FOUND);
    sample->filled = 1;
    sample->gpu = r.gpu;
    sample->gi = gi;
    sample->seq = ++g_gpm_seq;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample)
{
    return gpm_take(SYM_nvmlGpmSampleGet, device, -1, sample);
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId,
                                 nvmlGpmSample_t sample)
{
    if (gpuInstanceId >= MAX_GI_ID)
        return gpm_take(SYM_nvmlGpmMigSampleGet, device, (int)MAX_GI_ID, sample);
    return gpm_take(SYM_nvmlGpmMigSampleGet, device, (int)gpuInstanceId, sample);
}

/* Percent metrics: a base per metric, + GPU index, + half the GI id on an instance. */
static int gpm_base(unsigned id, double *base)
{
    switch (id) {
    case 1: *base = 60.0; return 0;   /* GRAPHICS_UTIL */
    case 2: *base = 50.0; return 0;   /* SM_UTIL */
    case 3: *base = 30.0; return 0;   /* SM_OCCUPANCY */
    case 5: *base = 25.0; return 0;   /* ANY_TENSOR_UTIL */
    case 10: *base = 20.0; return 0;  /* DRAM_BW_UTIL */
    case 11: *base = 1.0; return 0;   /* FP64_UTIL */
    case 12: *base = 12.0; return 0;  /* FP32_UTIL */
    case 13: *base = 13.0; return 0;  /* FP16_UTIL */
    case 20: *base = 100.0; return 0; /* PCIE_TX_PER_SEC, MiB/s */
    case 21: *base = 200.0; return 0; /* PCIE_RX_PER_SEC, MiB/s */
    default: return -1;
    }
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m)
{
    enter(SYM_nvmlGpmMetricsGet, 1);
    if (!g_refcount)
        return leave(NVML_ERROR_UNINITIALIZED);
    if (!m)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (m->version != GPM_METRICS_GET_VERSION)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    nvmlGpmSample_t a = m->sample1, b = m->sample2;
    if (!a || !b || a->magic != GPM_SAMPLE_MAGIC || b->magic != GPM_SAMPLE_MAGIC ||
        !a->filled || !b->filled || a->gpu != b->gpu || a->gi != b->gi ||
        a->seq >= b->seq || m->numMetrics > GPM_METRIC_MAX)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (gpu_is_lost(a->gpu))
        return leave(NVML_ERROR_GPU_IS_LOST);
    for (unsigned k = 0; k < m->numMetrics; k++) {
        double base;
        nvmlGpmMetric_t *metric = &m->metrics[k];
        memset(&metric->metricInfo, 0, sizeof metric->metricInfo);
        if (gpm_base(metric->metricId, &base) != 0) {
            metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            metric->value = 0.0;
            continue;
        }
        metric->nvmlReturn = NVML_SUCCESS;
        metric->value = base + a->gpu + (a->gi >= 0 ? 0.5 * a->gi : 0.0);
    }
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------ */
/* Control functions for tests                                         */
/* ------------------------------------------------------------------ */

void fake_nvml_reset(void)
{
    pthread_mutex_lock(&g_lock);
    g_last_error[0] = '\0';
    load_env();
    memset(g_calls, 0, sizeof g_calls);
    memset(g_cpu_ns, 0, sizeof g_cpu_ns);
    g_total_calls = 0;
    g_cost_ovr_set = 0;
    g_cost_ovr = NULL;
    refresh_cost_profile();
    memset(g_energy_reads, 0, sizeof g_energy_reads);
    memset(g_power_reads, 0, sizeof g_power_reads);
    for (unsigned g = 0; g < MAX_GPUS; g++)
        g_lost_ovr[g] = -1;
    memset(g_ns_on, 0, sizeof g_ns_on);
    memset(g_ns_off, 0, sizeof g_ns_off);
    memset(g_mig_ovr_set, 0, sizeof g_mig_ovr_set);
    memset(g_mig_ovr, 0, sizeof g_mig_ovr);
    memset(g_procs_ovr, 0, sizeof g_procs_ovr);
    memset(g_pu_last_seen, 0, sizeof g_pu_last_seen);
    memset(g_pu_newest, 0, sizeof g_pu_newest);
    memset(g_clock_events_set, 0, sizeof g_clock_events_set);
    events_reset();
    pthread_mutex_unlock(&g_lock);
}

/* Message for the last rejected configuration or control call, or "". */
const char *fake_nvml_last_error(void)
{
    static char copy[sizeof g_last_error];
    pthread_mutex_lock(&g_lock);
    memcpy(copy, g_last_error, sizeof copy);
    pthread_mutex_unlock(&g_lock);
    return copy;
}

void fake_nvml_set_lost(unsigned index, int lost)
{
    pthread_mutex_lock(&g_lock);
    g_last_error[0] = '\0';
    if (index >= MAX_GPUS)
        snprintf(g_last_error, sizeof g_last_error,
                 "set_lost: GPU index %u out of range", index);
    else
        g_lost_ovr[index] = lost ? 1 : 0;
    events_wake(); /* a waiter on a set with this GPU answers GPU_IS_LOST */
    pthread_mutex_unlock(&g_lock);
}

void fake_nvml_set_not_supported(unsigned index, const char *key, int on)
{
    pthread_mutex_lock(&g_lock);
    g_last_error[0] = '\0';
    int k = key ? key_from_name(key, strlen(key)) : -1;
    if (index >= MAX_GPUS) {
        snprintf(g_last_error, sizeof g_last_error,
                 "set_not_supported: GPU index %u out of range", index);
    } else if (k < 0) {
        set_error("set_not_supported: unknown key '%s'", key ? key : "(null)");
    } else if (on) {
        g_ns_on[index] |= 1u << k;
        g_ns_off[index] &= ~(1u << k);
    } else {
        g_ns_off[index] |= 1u << k;
        g_ns_on[index] &= ~(1u << k);
    }
    pthread_mutex_unlock(&g_lock);
}

int fake_nvml_set_mig(unsigned index, const char *spec)
{
    struct mig_cfg m;
    int rc = 0;
    pthread_mutex_lock(&g_lock);
    g_last_error[0] = '\0';
    if (index >= MAX_GPUS) {
        snprintf(g_last_error, sizeof g_last_error,
                 "set_mig: GPU index %u out of range", index);
        rc = -1;
    } else if (!spec) {
        memset(&g_mig_ovr[index], 0, sizeof g_mig_ovr[index]);
        g_mig_ovr_set[index] = 1;
    } else if (parse_mig_list(spec, spec + strlen(spec), &m) != 0) {
        set_error("set_mig: bad spec '%s'", spec);
        rc = -1;
    } else {
        g_mig_ovr[index] = m;
        g_mig_ovr_set[index] = 1;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Set GPU index's processes ("proc,proc" as in FAKE_NVML_PROCESSES after
 * "i="); NULL drops the override. 0, or -1 with fake_nvml_last_error. */
int fake_nvml_set_processes(unsigned index, const char *spec)
{
    static struct procs_cfg pc; /* large: keep off the stack */
    int rc = 0;
    pthread_mutex_lock(&g_lock);
    g_last_error[0] = '\0';
    if (index >= MAX_GPUS) {
        snprintf(g_last_error, sizeof g_last_error,
                 "set_processes: GPU index %u out of range", index);
        rc = -1;
    } else if (!spec) {
        memset(&g_procs_ovr[index], 0, sizeof g_procs_ovr[index]);
    } else if (parse_proc_list(spec, spec + strlen(spec), &pc) != 0) {
        set_error("set_processes: bad spec '%s'", spec);
        rc = -1;
    } else {
        g_procs_ovr[index] = pc;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* GPU index's last nvmlDeviceGetProcessUtilization: the lastSeenTimeStamp it
 * was given and the newest sample stamp it returned (0: none since reset). */
void fake_nvml_proc_util_stamps(unsigned index, unsigned long long *last_seen,
                                unsigned long long *newest)
{
    pthread_mutex_lock(&g_lock);
    *last_seen = index < MAX_GPUS ? g_pu_last_seen[index] : 0;
    *newest = index < MAX_GPUS ? g_pu_newest[index] : 0;
    pthread_mutex_unlock(&g_lock);
}

unsigned long long fake_nvml_calls(const char *symbol)
{
    unsigned long long n = 0;
    pthread_mutex_lock(&g_lock);
    for (int s = 0; symbol && s < SYM_COUNT; s++)
        if (strcmp(SYM_NAMES[s], symbol) == 0)
            n = g_calls[s];
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* Turn the cost profile `name` on ("h100"), or off (NULL or ""), overriding
 * FAKE_NVML_COST_PROFILE until the next reset. 0, or -1 with last_error. */
int fake_nvml_set_cost_profile(const char *name)
{
    int rc = 0;
    pthread_mutex_lock(&g_lock);
    g_last_error[0] = '\0';
    const struct cost_profile *p = NULL;
    if (name && *name && !(p = cost_profile_by_name(name, strlen(name)))) {
        set_error("set_cost_profile: unknown profile '%s' (known: h100)", name);
        rc = -1;
    } else {
        g_cost_ovr_set = 1;
        g_cost_ovr = p;
        refresh_cost_profile();
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* The effective cost profile's name, or "" when off. */
const char *fake_nvml_cost_profile(void)
{
    pthread_mutex_lock(&g_lock);
    const char *n = g_cost ? g_cost->name : "";
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* Microseconds a call of `symbol` burns under the effective profile (0 when
 * off or unknown; nvmlDeviceGetFieldValues: for a batch without a costly id). */
unsigned fake_nvml_cost_us(const char *symbol)
{
    unsigned us = 0;
    pthread_mutex_lock(&g_lock);
    for (int s = 0; g_cost && symbol && s < SYM_COUNT; s++)
        if (strcmp(SYM_NAMES[s], symbol) == 0)
            us = s == SYM_nvmlDeviceGetFieldValues ? g_cost->field_values_us
                                                    : g_sym_cost_us[s];
    pthread_mutex_unlock(&g_lock);
    return us;
}

/* Microseconds field `field_id` adds to a nvmlDeviceGetFieldValues batch
 * under the effective profile (0: none beyond the call's own cost). */
unsigned fake_nvml_field_cost_us(unsigned field_id)
{
    unsigned us = 0;
    pthread_mutex_lock(&g_lock);
    for (size_t k = 0; g_cost && k < g_cost->n_fields; k++)
        if (g_cost->fields[k].field_id == field_id)
            us = g_cost->fields[k].us;
    pthread_mutex_unlock(&g_lock);
    return us;
}

/* Thread CPU time (ns) spent inside calls of `symbol` while a cost profile
 * was on, since the last reset. */
unsigned long long fake_nvml_cpu_ns(const char *symbol)
{
    unsigned long long n = 0;
    pthread_mutex_lock(&g_lock);
    for (int s = 0; symbol && s < SYM_COUNT; s++)
        if (strcmp(SYM_NAMES[s], symbol) == 0)
            n = g_cpu_ns[s];
    pthread_mutex_unlock(&g_lock);
    return n;
}

unsigned long long fake_nvml_total_cpu_ns(void)
{
    unsigned long long n = 0;
    pthread_mutex_lock(&g_lock);
    for (int s = 0; s < SYM_COUNT; s++)
        n += g_cpu_ns[s];
    pthread_mutex_unlock(&g_lock);
    return n;
}

unsigned long long fake_nvml_total_calls(void)
{
    pthread_mutex_lock(&g_lock);
    unsigned long long n = g_total_calls;
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* Current nvmlInit* refcount (0 when the library is not initialized). */
unsigned fake_nvml_init_refcount(void)
{
    pthread_mutex_lock(&g_lock);
    unsigned n = g_refcount;
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* The i-th NVML symbol this library implements, or NULL past the end. */
const char *fake_nvml_symbol_name(unsigned i)
{
    return i < SYM_COUNT ? SYM_NAMES[i] : NULL;
}

/* The i-th FAKE_NVML_NOT_SUPPORTED key, or NULL past the end. */
const char *fake_nvml_key_name(unsigned i)
{
    return i < KEY_COUNT ? KEY_NAMES[i] : NULL;
}
