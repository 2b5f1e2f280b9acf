/* A Triton backend whose library, once opened, writes the id of the process
 * that opened it to MARKER (given with -DMARKER=...) from its constructor:
 * the proof that a load ran code into the process. Built by the executor's
 * and e2e/security's uploaded-code tests. */
#include <stdio.h>
#include <unistd.h>

__attribute__((constructor)) static void nereid_test_mark(void) {
  FILE* f = fopen(MARKER, "w");
  if (f != NULL) {
    fprintf(f, "%d", (int)getpid());
    fclose(f);
  }
}

__attribute__((visibility("default"))) void* TRITONBACKEND_ModelInstanceExecute(void* instance, void** requests, unsigned count) {
  (void)instance; (void)requests; (void)count;
  return NULL;
}
