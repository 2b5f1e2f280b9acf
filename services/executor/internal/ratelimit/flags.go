package ratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Mode is tritonserver's --rate-limit.
type Mode int

const (
	// Off (Triton's default) runs an execution as soon as an instance is
	// free, whatever the models' rate_limiter settings say.
	Off Mode = iota
	// ExecutionCount makes executions wait for their instances' resources,
	// served in the order of their scaled priority (execution count times
	// priority).
	ExecutionCount
)

// String is the flag's value.
func (m Mode) String() string {
	if m == ExecutionCount {
		return "execution_count"
	}
	return "off"
}

// ParseMode reads --rate-limit as tritonserver does: "execution_count" or
// "off", in any case.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(s) {
	case "execution_count":
		return ExecutionCount, nil
	case "off":
		return Off, nil
	}
	return Off, errors.New("invalid argument for --rate-limit")
}

// Devices a Resource or a Key can name besides a device's own id, with
// Triton's values (RateLimiter::RESOURCE_KIND_KEY).
const (
	// Global is the device of a Key of a global resource: one pool for
	// all devices.
	Global = -2
	// EveryDevice is the device of a Resource given without one: each
	// device has that many.
	EveryDevice = -1
)

// Resource is one --rate-limit-resource: Count copies of resource Name on
// Device, or on each device (EveryDevice). For a resource the models mark
// global, the device is ignored.
type Resource struct {
	Name   string
	Count  int
	Device int
}

// String is the flag's value.
func (r Resource) String() string {
	if r.Device == EveryDevice {
		return fmt.Sprintf("%s:%d", r.Name, r.Count)
	}
	return fmt.Sprintf("%s:%d:%d", r.Name, r.Count, r.Device)
}

// ParseResource reads one --rate-limit-resource,
// "<resource_name>:<count>[:<device>]", with tritonserver's messages. A
// negative count, which tritonserver would take as a huge unsigned one,
// is refused; so is a device below -1 (-1 is every device, as in
// TRITONSERVER_ServerOptionsAddRateLimiterResource).
func ParseResource(s string) (Resource, error) {
	format := fmt.Errorf("--rate-limit-resource option format is '<resource_name>:<count>:<device>' or '<resource_name>:<count>'. Got %s", s)
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return Resource{}, format
	}
	r := Resource{Name: parts[0], Device: EveryDevice}
	var err error
	if r.Count, err = parseInt(parts[1]); err != nil {
		return Resource{}, err
	}
	if len(parts) == 3 {
		if r.Device, err = parseInt(parts[2]); err != nil {
			return Resource{}, err
		}
	}
	if r.Count < 0 || r.Device < EveryDevice {
		return Resource{}, format
	}
	return r, nil
}

// parseInt reads an int option as tritonserver's ParseOption<int> does,
// with its messages.
func parseInt(s string) (int, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("Provided option value is out of bound. Got %s", s)
		}
		return 0, fmt.Errorf("Invalid option value. Got %s", s)
	}
	return int(n), nil
}
