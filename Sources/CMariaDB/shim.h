// MariaDB Connector/C. Only the MariaDB wrapper module imports this.
#include <mariadb/mysql.h>
#include <mariadb/errmsg.h>
#include <mariadb/mysqld_error.h>

// mysql_library_init is a macro over mysql_server_init; Swift cannot call macros.
static inline int cmariadb_library_init(void) { return mysql_server_init(0, 0, 0); }

// MYSQL_BIND.buffer_type is an enum field; a typed setter keeps the wrapper free of
// raw enum arithmetic.
static inline void cmariadb_bind_set_type(MYSQL_BIND *_Nonnull bind, int type) {
    bind->buffer_type = (enum enum_field_types)type;
}
