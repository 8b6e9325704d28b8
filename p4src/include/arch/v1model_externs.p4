// How the shared controls name the v1model externs. The TNA shell defines the same macros with
// Tofino externs, so that control bodies are written once.
#ifndef OPENGATE_ARCH_V1MODEL_EXTERNS_P4
#define OPENGATE_ARCH_V1MODEL_EXTERNS_P4

#include <v1model.p4>

#define OG_DIRECT_COUNTER(name) direct_counter(CounterType.packets_and_bytes) name
#define OG_DIRECT_COUNT(name) name.count()
#define OG_COUNTER(name, size) counter((bit<32>)(size), CounterType.packets_and_bytes) name
#define OG_COUNT(name, index) name.count((bit<32>)(index))
#define OG_METER(name, size) meter((bit<32>)(size), MeterType.bytes) name
#define OG_METER_EXECUTE(name, index, color) name.execute_meter((bit<32>)(index), color)
#define OG_METER_IS_RED(color) ((color) == METER_RED)
#define OG_SPM_SELECTOR(name) action_selector(HashAlgorithm.crc16, SPM_POOL_SIZE, SPM_SELECTOR_WIDTH) name
#define OG_SESSION_IDLE_TIMEOUT support_timeout = true

#endif
