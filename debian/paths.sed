# debian/rules: the deployment files (deploy/) as the package installs them. The
# binaries are in /usr/bin, not /usr/local/bin (`make install`'s PREFIX); units,
# sysusers.d and tmpfiles.d files are under /usr/lib, not /etc.
s#/usr/local/bin/ens-#/usr/bin/ens-#g
s#/etc/systemd/system/\(ens-[a-z-]*\.[a-z]*\)#/usr/lib/systemd/system/\1#g
s#/etc/sysusers\.d/ens\.conf#/usr/lib/sysusers.d/ens.conf#g
s#/etc/tmpfiles\.d/ens\.conf#/usr/lib/tmpfiles.d/ens.conf#g
s#\([^/]\)deploy/cron\.d/ens#\1/usr/share/ens/deploy/cron.d/ens#g
