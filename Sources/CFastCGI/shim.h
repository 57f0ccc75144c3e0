// libfcgi's thread-safe request API. Only the FastCGI wrapper module imports this.
#include <fcgiapp.h>
