package bus

// Run-time settings (Triton's trace and logging extensions) that every
// service applies: the gateway asked to change them publishes the whole
// new configuration on SettingsSubject(kind), and a process starting up
// asks a gateway for the current one on SettingsSyncSubject(kind).

const settingsPrefix = Prefix + ".settings."

// Kinds of run-time settings.
const (
	SettingsTrace   = "trace"
	SettingsLogging = "logging"
)

// QueueGateways is the queue group gateways join on subjects any one
// gateway may answer.
const QueueGateways = "gateways"

// SettingsSubject carries a kind of settings (busv1.TraceSettings for
// SettingsTrace) to every gateway, executor and sequence router, each of
// which acknowledges with busv1.SettingsAck: "nereid.v1.settings.<kind>".
func SettingsSubject(kind string) string { return settingsPrefix + Token(kind) }

// SettingsSyncSubject is where a starting process asks any gateway (queue
// QueueGateways) for the current settings of a kind:
// "nereid.v1.settings.<kind>.sync".
func SettingsSyncSubject(kind string) string { return settingsPrefix + Token(kind) + ".sync" }
