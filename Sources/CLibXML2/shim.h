// libxml2 (its SAX2 push parser only). Only the XML wrapper module imports this.
#include <libxml/parser.h>
#include <libxml/xmlerror.h>
#include <libxml/xmlversion.h>

// Responder threads parse at the same time, each with its own parser context; that is
// safe only when libxml2 keeps its global error state per thread.
#ifndef LIBXML_THREAD_ENABLED
#error "ENS needs a libxml2 built with thread support (LIBXML_THREAD_ENABLED)"
#endif
