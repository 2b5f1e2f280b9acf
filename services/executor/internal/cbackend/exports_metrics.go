//go:build cgo

package cbackend

/*
#define NEREID_TYPES_ONLY
#include <stdlib.h>
#include "abi.h"
*/
import "C"

import (
	"unsafe"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

//export TRITONSERVER_MetricFamilyNew
func TRITONSERVER_MetricFamilyNew(out **C.TRITONSERVER_MetricFamily, kind C.TRITONSERVER_MetricKind, name, desc *C.char) *C.TRITONSERVER_Error {
	if out == nil || name == nil {
		return newError(tritonerr.InvalidArgf("metric family and name must not be null"))
	}
	f, err := newFamily(MetricKind(kind), C.GoString(name), C.GoString(desc))
	if err != nil {
		return newError(err)
	}
	cf := (*C.TRITONSERVER_MetricFamily)(C.malloc(C.sizeof_TRITONSERVER_MetricFamily))
	cf.h = C.uintptr_t(register(f))
	setOut(out, cf)
	return nil
}

//export TRITONSERVER_MetricFamilyDelete
func TRITONSERVER_MetricFamilyDelete(cf *C.TRITONSERVER_MetricFamily) *C.TRITONSERVER_Error {
	if cf == nil {
		return newError(tritonerr.InvalidArgf("metric family must not be null"))
	}
	f := lookup[*family](cf.h)
	if f == nil {
		return newError(tritonerr.InvalidArgf("metric family is no longer valid"))
	}
	if err := f.release(); err != nil {
		return newError(err)
	}
	unregister(uintptr(cf.h))
	C.free(unsafe.Pointer(cf))
	return nil
}

//export TRITONSERVER_GetMetricFamilyKind
func TRITONSERVER_GetMetricFamilyKind(cf *C.TRITONSERVER_MetricFamily, kind *C.TRITONSERVER_MetricKind) *C.TRITONSERVER_Error {
	if cf == nil {
		return newError(tritonerr.InvalidArgf("metric family must not be null"))
	}
	f := lookup[*family](cf.h)
	if f == nil {
		return newError(tritonerr.InvalidArgf("metric family is no longer valid"))
	}
	*kind = C.TRITONSERVER_MetricKind(f.kind)
	return nil
}

func newMetric(out **C.TRITONSERVER_Metric, cf *C.TRITONSERVER_MetricFamily, labels **C.TRITONSERVER_Parameter, n C.uint64_t, buckets []float64) *C.TRITONSERVER_Error {
	if out == nil || cf == nil {
		return newError(tritonerr.InvalidArgf("metric and metric family must not be null"))
	}
	f := lookup[*family](cf.h)
	if f == nil {
		return newError(tritonerr.InvalidArgf("metric family is no longer valid"))
	}
	var ls [][2]string
	if n > 0 {
		for _, p := range unsafe.Slice(labels, int(n)) {
			if p == nil || p._type != C.TRITONSERVER_PARAMETER_STRING {
				return newError(tritonerr.InvalidArgf("metric labels must be string parameters"))
			}
			ls = append(ls, [2]string{C.GoString(p.name), C.GoString(p.s)})
		}
	}
	m, err := f.newMetric(ls, buckets)
	if err != nil {
		return newError(err)
	}
	cm := (*C.TRITONSERVER_Metric)(C.malloc(C.sizeof_TRITONSERVER_Metric))
	cm.h = C.uintptr_t(register(m))
	setOut(out, cm)
	return nil
}

//export TRITONSERVER_MetricNew
func TRITONSERVER_MetricNew(out **C.TRITONSERVER_Metric, cf *C.TRITONSERVER_MetricFamily, labels **C.TRITONSERVER_Parameter, n C.uint64_t) *C.TRITONSERVER_Error {
	return newMetric(out, cf, labels, n, nil)
}

//export TRITONSERVER_MetricNewWithArgs
func TRITONSERVER_MetricNewWithArgs(out **C.TRITONSERVER_Metric, cf *C.TRITONSERVER_MetricFamily, labels **C.TRITONSERVER_Parameter, n C.uint64_t, args *C.TRITONSERVER_MetricArgs) *C.TRITONSERVER_Error {
	var buckets []float64
	if args != nil {
		var nb C.uint64_t
		p := C.nereid_metric_args_buckets(args, &nb)
		buckets = []float64{}
		if nb > 0 {
			for _, b := range unsafe.Slice(p, int(nb)) {
				buckets = append(buckets, float64(b))
			}
		}
	}
	return newMetric(out, cf, labels, n, buckets)
}

func metricOf(cm *C.TRITONSERVER_Metric) (*metric, *C.TRITONSERVER_Error) {
	if cm == nil {
		return nil, newError(tritonerr.InvalidArgf("metric must not be null"))
	}
	m := lookup[*metric](cm.h)
	if m == nil {
		return nil, newError(tritonerr.InvalidArgf("metric is no longer valid"))
	}
	return m, nil
}

//export TRITONSERVER_MetricDelete
func TRITONSERVER_MetricDelete(cm *C.TRITONSERVER_Metric) *C.TRITONSERVER_Error {
	m, e := metricOf(cm)
	if e != nil {
		return e
	}
	m.release()
	unregister(uintptr(cm.h))
	C.free(unsafe.Pointer(cm))
	return nil
}

//export TRITONSERVER_MetricValue
func TRITONSERVER_MetricValue(cm *C.TRITONSERVER_Metric, v *C.double) *C.TRITONSERVER_Error {
	m, e := metricOf(cm)
	if e != nil {
		return e
	}
	x, err := m.read()
	*v = C.double(x)
	return newError(err)
}

//export TRITONSERVER_MetricIncrement
func TRITONSERVER_MetricIncrement(cm *C.TRITONSERVER_Metric, v C.double) *C.TRITONSERVER_Error {
	m, e := metricOf(cm)
	if e != nil {
		return e
	}
	return newError(m.increment(float64(v)))
}

//export TRITONSERVER_MetricSet
func TRITONSERVER_MetricSet(cm *C.TRITONSERVER_Metric, v C.double) *C.TRITONSERVER_Error {
	m, e := metricOf(cm)
	if e != nil {
		return e
	}
	return newError(m.set(float64(v)))
}

//export TRITONSERVER_MetricObserve
func TRITONSERVER_MetricObserve(cm *C.TRITONSERVER_Metric, v C.double) *C.TRITONSERVER_Error {
	m, e := metricOf(cm)
	if e != nil {
		return e
	}
	return newError(m.observe(float64(v)))
}

//export TRITONSERVER_GetMetricKind
func TRITONSERVER_GetMetricKind(cm *C.TRITONSERVER_Metric, kind *C.TRITONSERVER_MetricKind) *C.TRITONSERVER_Error {
	m, e := metricOf(cm)
	if e != nil {
		return e
	}
	*kind = C.TRITONSERVER_MetricKind(m.f.kind)
	return nil
}
