// Package tritonapi holds the list of every function of Triton's C API
// headers a backend meets (tritonserver.h and tritonbackend.h, in
// testdata/functions.txt) and the tests that hold the bridge to it: every
// function is declared by the bridge's headers with Triton's signature,
// exported by the libtritonserver.so backends link against, defined by the
// bridge with Triton's argument count, and listed with its status on the
// docs' Triton backends page.
package tritonapi
