// The conformance suite on the backend named by --backend (conformance.h):
// every test comes from collectives_suite.cc and main from conformance_main.cc;
// this file only gives the binary a source of its own.
#include "zeroshard/tests/collectives/conformance.h"
