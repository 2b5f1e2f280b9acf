// Package tracesetting holds Triton's trace extension settings as every
// Nereid service applies them: a global setting and per-model overrides of
// trace_level, trace_rate, trace_count and log_frequency, with Triton's
// fallback rules (a model's unspecified fields follow the global setting,
// the global setting's unspecified fields follow the startup default of
// --trace-config), its request parsing and validation messages, and the
// sampling decision (one trace every trace_rate requests, at most
// trace_count traces) made without allocating.
//
// A change is made on one gateway (Manager.Update), which publishes the
// whole new configuration (busv1.TraceSettings) on
// bus.SettingsSubject(bus.SettingsTrace); every gateway, executor and
// sequence router applies the newest version it has seen (Manager.Apply),
// and a starting process asks a gateway for the current one (Follow).
package tracesetting
