"""Hand-written scenarios about running a Linux host: systemd, nginx, shared ACLs, logrotate, cron, ssh.
Runs in: any Python >= 3.11, standard library only (`python data/make_samples.py`).
A unit crash-looping under sandboxing, a broken site config, group permissions on a share, a full /var,
a cron script with CRLF line endings, private key modes.
"""

from datetime import datetime, timezone

from .scenario import Round, S, Scenario, bash, edit, read
from .synthetic_text import hexid, journal, ls_la


def sc_systemd(rng, long=False):
    svc = rng.choice(["invoice-api", "geo-tiles", "report-worker", "notify-hub"])
    host = f"app-{rng.randint(10, 40)}"
    port = rng.choice([8080, 8081, 9000, 5005])
    start = datetime(2024, rng.randint(1, 9), rng.randint(1, 28), 7, rng.randint(0, 59), tzinfo=timezone.utc)
    crash = [f"Starting {svc} service...", f"Started {svc} service.",
             f"INFO  [{svc}] loading config from /etc/{svc}/config.toml",
             f"INFO  [{svc}] opening cache /var/lib/{svc}/cache.sqlite",
             "Traceback (most recent call last):",
             f'  File "/opt/{svc}/app/main.py", line 88, in <module>',
             "    app = create_app()",
             f'  File "/opt/{svc}/app/main.py", line 61, in create_app',
             "    cache = Cache(settings.cache_path)",
             f'  File "/opt/{svc}/app/cache.py", line 23, in __init__',
             "    self.conn = sqlite3.connect(path, timeout=5)",
             f"sqlite3.OperationalError: unable to open database file",
             f"{svc}.service: Main process exited, code=exited, status=1/FAILURE",
             f"{svc}.service: Failed with result 'exit-code'.",
             f"{svc}.service: Scheduled restart job, restart counter is at N."]
    reps = 44 if long else 3
    jl = journal(rng, host, svc, "python3", rng.randint(2000, 9000), crash, start, repeat=reps)
    cnt = iter(range(1, 10000))
    jl = "\n".join(l.replace("counter is at N", f"counter is at {next(cnt)}") for l in jl.splitlines())
    status = f"""\u25cf {svc}.service - {svc} HTTP service
     Loaded: loaded (/etc/systemd/system/{svc}.service; enabled; preset: enabled)
     Active: activating (auto-restart) (Result: exit-code) since {start.strftime('%a %Y-%m-%d %H:%M:%S')} UTC; 2s ago
    Process: {rng.randint(20000, 30000)} ExecStart=/opt/{svc}/venv/bin/python -m app.main (code=exited, status=1/FAILURE)
   Main PID: {rng.randint(20000, 30000)} (code=exited, status=1/FAILURE)
        CPU: {rng.randint(300, 900)}ms"""
    unit = f"""[Unit]
Description={svc} HTTP service
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User={svc}
Group={svc}
WorkingDirectory=/opt/{svc}
Environment=PYTHONUNBUFFERED=1
Environment={svc.upper().replace('-', '_')}_PORT={port}
ExecStart=/opt/{svc}/venv/bin/python -m app.main
Restart=on-failure
RestartSec=3
NoNewPrivileges=true
ProtectSystem=strict
ProtectHome=true
ReadWritePaths=/var/log/{svc}

[Install]
WantedBy=multi-user.target
"""
    steps = [
        S(f"The task is about {svc}.service crash-looping. First the unit status and recent logs.",
          "Run systemctl status and the last journal entries for the unit.",
          bash(f"systemctl status {svc} --no-pager", status, rc=3),
          bash(f"journalctl -u {svc} -n {60 if not long else 400} --no-pager", jl, dur=2.0)),
        S(f"sqlite3 cannot open /var/lib/{svc}/cache.sqlite. Either the directory is missing, has the wrong owner, or the sandbox makes it read-only.",
          "Check the directory and the unit file.",
          bash(f"ls -la /var/lib/{svc}; id {svc}",
               ls_la(rng, [("cache.sqlite", "f", rng.randint(100, 900) * 1024), ("cache.sqlite-journal", "f", 0)], owner="root", group="root")
               + f"\nuid=99{rng.randint(1, 9)}({svc}) gid=99{rng.randint(1, 9)}({svc}) groups=99{rng.randint(1, 9)}({svc})"),
          read(f"/etc/systemd/system/{svc}.service", unit)),
        S(f"Two problems: /var/lib/{svc} and its files are owned by root (the service runs as {svc}), and ProtectSystem=strict makes "
          f"/var read-only except for ReadWritePaths, which only lists /var/log/{svc}. StateDirectory= fixes both: systemd creates the "
          "directory, chowns it to the service user, and makes it writable inside the sandbox.",
          "Add StateDirectory to the unit, reload systemd and restart.",
          edit(f"/etc/systemd/system/{svc}.service", f"ReadWritePaths=/var/log/{svc}\n",
               f"ReadWritePaths=/var/log/{svc}\nStateDirectory={svc}\nStateDirectoryMode=0750\n"),
          bash(f"systemctl daemon-reload && systemctl restart {svc} && sleep 3 && systemctl is-active {svc} && ls -la /var/lib/{svc}",
               "active\n" + ls_la(rng, [("cache.sqlite", "f", rng.randint(100, 900) * 1024), ("cache.sqlite-journal", "f", 0)], owner=svc, group=svc), dur=5.0)),
        S("It is active and systemd has taken over the ownership. I'll check that it really serves requests and isn't just between restarts.",
          "Query the health endpoint and make sure the restart counter stays put.",
          bash(f"curl -fsS localhost:{port}/healthz; echo; systemctl show {svc} -p NRestarts -p ActiveState",
               f'{{"status":"ok","cache":"sqlite","uptime_s":{rng.randint(5, 30)}}}\nNRestarts=0\nActiveState=active')),
    ]
    return Scenario("systemd-crashloop", "Fix a crash-looping systemd service", host, f"/opt/{svc}", [
        Round(f"{svc}.service on this box keeps restarting since this morning's hardening change. Find the cause and fix it properly (don't just run it as root).",
              steps, f"The service crashed because it could not open /var/lib/{svc}/cache.sqlite: the directory was owned by root, and the new ProtectSystem=strict sandbox left /var read-only except for /var/log/{svc}. I added StateDirectory={svc} (mode 0750) to the unit, so systemd now creates the directory, chowns it to the {svc} user and makes it writable in the sandbox. After daemon-reload and a restart the service is active, /healthz answers, and NRestarts is 0."),
    ], "cross", f"/etc/systemd/system/{svc}.service")


def sc_nginx(rng, long=False):
    site = rng.choice(["shop", "docs", "status", "grafana"])
    dom = f"{site}.example.internal"
    host = f"web-{rng.randint(1, 6)}"
    up = rng.choice([3000, 8000, 8080])
    conf = f"""upstream {site}_app {{
    server 127.0.0.1:{up};
    keepalive 16;
}}

server {{
    listen 80 default_server;
    server_name {dom};
    return 301 https://$host$request_uri;
}}

server {{
    listen 443 ssl http2;
    server_name {dom};

    ssl_certificate     /etc/ssl/{site}/fullchain.pem;
    ssl_certificate_key /etc/ssl/{site}/privkey.pem;

    location /static/ {{
        alias /srv/{site}/static/
        expires 7d;
    }}

    location / {{
        proxy_pass http://{site}_app;
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }}
}}
"""
    steps = [
        S("Start with nginx's own config test to see the exact error.", "Run nginx -t.",
          bash("nginx -t", f'nginx: [emerg] invalid number of arguments in "alias" directive in /etc/nginx/sites-enabled/{site}.conf:23\nnginx: configuration file /etc/nginx/nginx.conf test failed', rc=1)),
        S("Line 23 is inside the alias block; probably a missing semicolon that makes nginx read the next line as more arguments.", "Read the site config.",
          read(f"/etc/nginx/sites-enabled/{site}.conf", conf)),
        S("`alias /srv/.../static/` has no trailing semicolon, so `expires 7d` is parsed as extra alias arguments.", "Add the semicolon and test again.",
          edit(f"/etc/nginx/sites-enabled/{site}.conf", f"alias /srv/{site}/static/\n", f"alias /srv/{site}/static/;\n"),
          bash("nginx -t", f'nginx: [warn] duplicate listen options for [::]:80 in /etc/nginx/sites-enabled/default:22\nnginx: [emerg] a duplicate default server for 0.0.0.0:80 in /etc/nginx/sites-enabled/{site}.conf:7\nnginx: configuration file /etc/nginx/nginx.conf test failed', rc=1)),
        S("Next error: the distro's default site also claims default_server on port 80. The default site is not used on this host.",
          "Check what sites-enabled/default is and disable it rather than editing the packaged file.",
          bash("ls -la /etc/nginx/sites-enabled/", ls_la(rng, [("default", "l", "/etc/nginx/sites-available/default"), (f"{site}.conf", "f", len(conf))])),
          bash("rm /etc/nginx/sites-enabled/default && nginx -t && systemctl reload nginx && curl -skI https://127.0.0.1/ -H 'Host: " + dom + "' | head -5",
               "nginx: the configuration file /etc/nginx/nginx.conf syntax is ok\nnginx: configuration file /etc/nginx/nginx.conf test is successful\nHTTP/2 200 \nserver: nginx/1.24.0\ndate: Wed, 12 Jun 2024 09:41:07 GMT\ncontent-type: text/html; charset=utf-8\ncontent-length: " + str(rng.randint(2000, 40000)), dur=3.0)),
    ]
    return Scenario("nginx-config", "Repair an nginx site config", host, "/etc/nginx", [
        Round(f"nginx on this host won't reload after someone edited the {site} site. Fix the configuration and reload nginx; the site must answer on https for {dom}.",
              steps, f"There were two problems. {site}.conf was missing a semicolon after the `alias` directive in the /static/ location, and the distro's `default` site (a symlink in sites-enabled) also declared default_server on port 80. I added the semicolon and removed the default symlink (the packaged file in sites-available is untouched). `nginx -t` passes, nginx is reloaded, and https://{dom}/ returns 200."),
    ], "cross", "")


def sc_perms(rng, long=False):
    grp = rng.choice(["analytics", "finance", "research"])
    users = rng.sample(["alice", "bob", "chen", "dana", "emil", "farah"], 3)
    host = f"share-{rng.randint(1, 5)}"
    d = f"/srv/shared/{grp}"
    lst = ls_la(rng, [(f"q{q}_report.xlsx", "f", rng.randint(40000, 900000)) for q in range(1, 4)] + [("drafts", "d", 4096), ("raw", "d", 4096)],
                owner=users[0], group=users[0])
    steps = [
        S("Check the group membership and the current ownership and mode of the share.", "id for each user, ls -la, getfacl.",
          bash(f"for u in {' '.join(users)}; do id $u; done; ls -la {d}; getfacl -p {d}",
               "\n".join(f"uid={1001 + i}({u}) gid={1001 + i}({u}) groups={1001 + i}({u}),2{rng.randint(100, 999)}({grp})" for i, u in enumerate(users)) + "\n" + lst +
               f"\n# file: {d}\n# owner: {users[0]}\n# group: {users[0]}\nuser::rwx\ngroup::r-x\nother::r-x\n")),
        S(f"Everything is owned by {users[0]}'s private group, the directory has no setgid bit and there are no default ACLs, so new files get each creator's private group "
          "and the others can't modify them. Fix: group-own everything by the project group, set setgid on directories, give the group rw, and add default ACLs so new files are group-writable regardless of umask.",
          "Apply chgrp, chmod (dirs 2770, files 660) and default ACLs.",
          bash(f"chgrp -R {grp} {d} && find {d} -type d -exec chmod 2770 {{}} + && find {d} -type f -exec chmod 660 {{}} + && setfacl -R -m g:{grp}:rwX -m d:g:{grp}:rwX -m d:o::--- {d} && getfacl -p {d}",
               f"# file: {d}\n# owner: {users[0]}\n# group: {grp}\n# flags: -s-\nuser::rwx\ngroup::rwx\ngroup:{grp}:rwx\nmask::rwx\nother::---\ndefault:user::rwx\ndefault:group::rwx\ndefault:group:{grp}:rwx\ndefault:mask::rwx\ndefault:other::---\n")),
        S("Test from a different user: create a file, then have a third user edit it.", "Use sudo -u to simulate the users.",
          bash(f"sudo -u {users[1]} sh -c 'umask 022; echo draft > {d}/drafts/test_{users[1]}.txt' && sudo -u {users[2]} sh -c 'echo edit >> {d}/drafts/test_{users[1]}.txt' && ls -la {d}/drafts/test_{users[1]}.txt && rm {d}/drafts/test_{users[1]}.txt",
               f"-rw-rw----+ 1 {users[1]} {grp} 11 Jun 12 10:02 {d}/drafts/test_{users[1]}.txt")),
    ]
    return Scenario("shared-dir-perms", "Fix permissions on a shared directory", host, d, [
        Round(f"Members of the {grp} group can't edit each other's files in {d}. Set it up so every file created there is editable by the whole group and not readable by others, even for users with umask 022.",
              steps, f"The share and its files were owned by {users[0]}'s private group, with no setgid bit and no default ACLs. I changed the group of everything to {grp}, set directories to 2770 (setgid, so new files inherit the group) and files to 660, and added default ACLs (g:{grp}:rwX, other none) so new files stay group-writable even when the creator's umask is 022. A file created by {users[1]} with umask 022 could be edited by {users[2]}; I removed that test file afterwards."),
    ], "single", "")


def sc_diskfull(rng, long=False):
    app = rng.choice(["orders", "mailer", "ingest"])
    host = f"worker-{rng.randint(1, 30)}"
    big = rng.randint(18, 41)
    df = f"""Filesystem      Size  Used Avail Use% Mounted on
/dev/nvme0n1p1   30G   12G   17G  42% /
/dev/nvme0n1p3   50G   50G     0 100% /var
tmpfs           3.9G     0  3.9G   0% /dev/shm"""
    du = f"""8.0K\t/var/mail
24K\t/var/tmp
310M\t/var/cache
1.2G\t/var/lib
{big + 6}G\t/var/log
{big + 8}G\t/var"""
    lst = ls_la(rng, [(f"{app}.log", "f", rng.randint(10, 12) * 1024 ** 3), (f"{app}.log.1", "f", 0)] +
                [(f"{app}.log.{i}.gz", "f", rng.randint(80, 400) * 1024 ** 2) for i in range(2, 5)], owner=app, group=app)
    lr = f"""/var/log/{app}/*.log {{
    daily
    rotate 14
    compress
    delaycompress
    missingok
    notifempty
    create 0640 {app} {app}
}}
"""
    steps = [
        S("Confirm which filesystem is full and where the space went.", "df and du on /var.",
          bash("df -h && du -xh --max-depth=1 /var 2>/dev/null | sort -h | tail -6", df + "\n" + du, dur=5.0)),
        S("/var/log holds most of it. Drill into the app's log directory.", "ls the app log dir and run logrotate in debug mode.",
          bash(f"ls -la /var/log/{app} && logrotate -d /etc/logrotate.d/{app} 2>&1 | tail -5", lst +
               f"\nreading config file /etc/logrotate.d/{app}\nerror: skipping \"/var/log/{app}/{app}.log\" because parent directory has insecure permissions (It's world writable or writable by group which is not \"root\") Set \"su\" directive in config file to tell logrotate which user/group should be used for rotation.")),
        S(f"logrotate has been skipping the file because /var/log/{app} is owned by {app}. The fix is a `su {app} {app}` directive. The live log is ~{big}G, so "
          "after fixing rotation I will force one rotation. The service keeps the file open, so use copytruncate rather than deleting the file.",
          "Edit the logrotate config, force rotation, check space.",
          read(f"/etc/logrotate.d/{app}", lr),
          edit(f"/etc/logrotate.d/{app}", "    create 0640", f"    su {app} {app}\n    copytruncate\n    maxsize 1G\n    create 0640"),
          bash(f"logrotate -f /etc/logrotate.d/{app} && ls -la /var/log/{app} | head -6 && df -h /var",
               "\n".join(ls_la(rng, [(f"{app}.log", "f", 0), (f"{app}.log.1", "f", rng.randint(10, 12) * 1024 ** 3)], owner=app, group=app).splitlines()[:6]) +
               f"\nFilesystem      Size  Used Avail Use% Mounted on\n/dev/nvme0n1p3   50G   50G     0 100% /var", dur=30.0)),
        S("Still 100%: the rotated copy is uncompressed (delaycompress) and still large. Compress it now instead of waiting a day.", "gzip the .1 file and re-check.",
          bash(f"nice gzip -9 /var/log/{app}/{app}.log.1 && df -h /var && ls -la /var/log/{app}",
               f"Filesystem      Size  Used Avail Use% Mounted on\n/dev/nvme0n1p3   50G   {50 - big + 3}G   {big - 3}G  {int(100 * (50 - big + 3) / 50)}% /var\n" +
               ls_la(rng, [(f"{app}.log", "f", rng.randint(1000, 90000)), (f"{app}.log.1.gz", "f", rng.randint(300, 900) * 1024 ** 2)] +
                     [(f"{app}.log.{i}.gz", "f", rng.randint(80, 400) * 1024 ** 2) for i in range(2, 5)], owner=app, group=app), dur=60.0)),
    ]
    return Scenario("disk-full-logrotate", "Free /var and fix log rotation", host, "/var/log", [
        Round(f"/var is at 100% on this worker and the {app} service is failing writes. Free space safely and make sure it doesn't happen again.",
              steps, f"/var filled up because logrotate had been skipping /var/log/{app}/*.log: the directory is owned by {app}, and logrotate refuses to rotate there without a `su` directive. I added `su {app} {app}`, `copytruncate` (the service keeps the file open) and `maxsize 1G` to /etc/logrotate.d/{app}, forced a rotation and compressed the rotated {big}G file. /var now has about {big - 3}G free, and daily rotation works again."),
    ], "cross", "")


def sc_cron(rng, long=False):
    host = f"db-{rng.randint(1, 3)}"
    db = rng.choice(["shop", "crm", "inventory"])
    steps = [
        S("Check the crontab and whether cron actually ran the job.", "crontab -l and grep syslog for the job.",
          bash("crontab -l; grep -a 'CRON.*backup' /var/log/syslog | tail -4",
               f"# m h dom mon dow command\n30 2 * * * /opt/backup/pg_backup.sh >> /var/log/pg_backup.log 2>&1\n" +
               "\n".join(f"Jun {d} 02:30:01 {host} CRON[{rng.randint(10000, 60000)}]: (root) CMD (/opt/backup/pg_backup.sh >> /var/log/pg_backup.log 2>&1)" for d in range(9, 13)))),
        S("Cron runs it every night, so the script itself fails. Its log should say why.", "Tail the backup log and run the script by hand.",
          bash("tail -3 /var/log/pg_backup.log; /opt/backup/pg_backup.sh", "/bin/sh: 1: /opt/backup/pg_backup.sh: not found\n/bin/sh: 1: /opt/backup/pg_backup.sh: not found\n/bin/sh: 1: /opt/backup/pg_backup.sh: not found\nbash: /opt/backup/pg_backup.sh: /bin/bash^M: bad interpreter: No such file or directory", rc=126)),
        S("'/bin/bash^M: bad interpreter': the script has Windows CRLF line endings (it was edited on a laptop and copied over).", "Confirm with file, strip the CRs, run it.",
          bash("file /opt/backup/pg_backup.sh && sed -i 's/\\r$//' /opt/backup/pg_backup.sh && file /opt/backup/pg_backup.sh && /opt/backup/pg_backup.sh",
               f"/opt/backup/pg_backup.sh: Bourne-Again shell script, ASCII text executable, with CRLF line terminators\n/opt/backup/pg_backup.sh: Bourne-Again shell script, ASCII text executable\n[2024-06-12 10:11:02] dumping {db} ...\n[2024-06-12 10:11:{rng.randint(20, 59)}] wrote /backups/{db}-20240612-1011.sql.gz ({rng.randint(200, 900)} MB)\n[2024-06-12 10:11:59] pruning backups older than 14 days: 0 removed", dur=40.0)),
        S("Works by hand. Add a .gitattributes rule in the ops repo so this can't come back? The script lives in /opt/backup, which is a checkout.", "Check git and add eol=lf.",
          bash("cd /opt/backup && git status -s && printf '*.sh text eol=lf\\n' >> .gitattributes && git add .gitattributes pg_backup.sh && git commit -qm 'backup: force LF endings for shell scripts' && git log --oneline -1",
               f" M pg_backup.sh\n{hexid(rng)} backup: force LF endings for shell scripts")),
    ]
    return Scenario("cron-crlf", "Fix a nightly backup cron job", host, "/root", [
        Round(f"The nightly postgres backup for {db} hasn't produced a file since June 9. Find out why and fix it.",
              steps, f"cron was running /opt/backup/pg_backup.sh every night, but the script had CRLF line endings since the June 9 change, so the kernel looked for the interpreter '/bin/bash\\r' and the script never started. I stripped the carriage returns, ran the backup by hand (it wrote /backups/{db}-20240612-1011.sql.gz), and committed a .gitattributes rule (`*.sh text eol=lf`) in /opt/backup so the script can't be checked out with CRLF again."),
    ], "single", "/opt/backup/pg_backup.sh")


def sc_ssh(rng, long=False):
    host = f"deploy-{rng.randint(1, 9)}"
    target = f"app{rng.randint(1, 9)}.prod.internal"
    steps = [
        S("Reproduce the failing ssh connection verbosely.", "ssh -v with BatchMode.",
          bash(f"sudo -u deploy ssh -o BatchMode=yes -v deploy@{target} true 2>&1 | tail -12",
               f"debug1: Connecting to {target} [10.20.{rng.randint(0, 255)}.{rng.randint(1, 254)}] port 22.\ndebug1: Connection established.\ndebug1: identity file /home/deploy/.ssh/id_ed25519 type 3\ndebug1: Authenticating to {target}:22 as 'deploy'\ndebug1: Host '{target}' is known and matches the ED25519 host key.\ndebug1: Authentications that can continue: publickey\ndebug1: Next authentication method: publickey\ndebug1: Trying private key: /home/deploy/.ssh/id_ed25519\n@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n@         WARNING: UNPROTECTED PRIVATE KEY FILE!          @\n@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\nPermissions 0644 for '/home/deploy/.ssh/id_ed25519' are too open.\nThis private key will be ignored.\ndeploy@{target}: Permission denied (publickey).", rc=255)),
        S("The private key is world-readable, so ssh ignores it. Check the whole .ssh directory.", "ls -la ~deploy/.ssh.",
          bash("ls -la /home/deploy/.ssh", ls_la(rng, [("authorized_keys", "f", 405), ("config", "f", 180), ("id_ed25519", "f", 411), ("id_ed25519.pub", "f", 103), ("known_hosts", "f", 2656)], owner="deploy", group="deploy"))),
        S("Fix modes: directory 700, private key and config 600, and make sure deploy owns everything.", "chmod/chown and retry.",
          bash(f"chown -R deploy:deploy /home/deploy/.ssh && chmod 700 /home/deploy/.ssh && chmod 600 /home/deploy/.ssh/id_ed25519 /home/deploy/.ssh/config && sudo -u deploy ssh -o BatchMode=yes deploy@{target} 'hostname; uptime'",
               f"{target.split('.')[0]}\n 10:{rng.randint(10, 59)}:{rng.randint(10, 59)} up {rng.randint(2, 90)} days,  2:1{rng.randint(0, 9)},  0 users,  load average: 0.{rng.randint(10, 99)}, 0.{rng.randint(10, 99)}, 0.{rng.randint(10, 99)}")),
    ]
    return Scenario("ssh-key-perms", "Fix ssh key permissions for deploys", host, "/root", [
        Round(f"Deploys from this host fail with 'Permission denied (publickey)' when connecting to {target} as the deploy user. Fix it.", steps,
              f"ssh ignored /home/deploy/.ssh/id_ed25519 because the key was mode 0644 ('UNPROTECTED PRIVATE KEY FILE'). I set ~deploy/.ssh to 700 and the key and config to 600, owned by deploy. `ssh deploy@{target}` now authenticates with the key."),
    ], "single", "")
