"""The admin console in a real browser (Chromium, driven by Selenium), against the real worker and
console processes, and its JSON API against its OpenAPI document (schemathesis).

    AUTH_KAFKA_BROKERS=… AUTH_TOPIC_REQUESTS=… AUTH_TOPIC_RESULTS=… AUTH_CONSOLE_URL=http://localhost:8090 \
    AUTH_WORKER_BINARY=.build/debug/auth-worker AUTH_DATABASE_URL=… python3 console-browser.py [--screenshots DIR]

Users are made through Kafka as a gateway makes them (the Python gateway example's client);
console roles are granted with the CLI (`auth-worker admins grant`); TOTP codes come from pyotp.
Prints one JSON line per step; exits non-zero on the first step that does not hold.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import pyotp
from jwcrypto import jwe, jwk
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "python-gateway"))
import gateway  # noqa: E402  (the example's Kafka client)

CONSOLE = os.environ["AUTH_CONSOLE_URL"].rstrip("/")
BINARY = os.environ["AUTH_WORKER_BINARY"]


def step(name, **facts):
    print(json.dumps({"step": name, **facts}), flush=True)


def check(condition, message):
    if not condition:
        print(json.dumps({"step": "failed", "why": message}), flush=True)
        sys.exit(1)


class Gateway(gateway.AuthGateway):
    """The example's client, opening every sealed part of an answer (session, factor secret)."""

    def call(self, data, timeout=15, tenant=None):
        key = jwk.JWK.generate(kty="OKP", crv="X25519")
        request_id = str(uuid.uuid4())
        event = {"specversion": "1.0", "id": request_id, "source": "/gateway/console-test",
                 "type": "auth.login.request", "datacontenttype": "application/json",
                 "data": {**data, "reply_key": key.export_public(as_dict=True)["x"]}}
        if tenant:
            event["tenant"] = tenant
        self.producer.produce(gateway.REQUESTS, key=request_id, value=json.dumps(event),
                              headers={"content-type": "application/cloudevents+json"})
        self.producer.flush(10)
        deadline = time.monotonic() + timeout
        while request_id not in self.early:
            check(time.monotonic() < deadline, f"no answer to {data['method']}")
            message = self.consumer.poll(0.2)
            if message is not None and not message.error():
                self.early[(message.key() or b"").decode()] = message.value()
        result = json.loads(self.early.pop(request_id))["data"]
        for sealed, field in (("sealed_session", "session"), ("sealed_mfa", "mfa")):
            if sealed in result:
                token = jwe.JWE()
                token.deserialize(result.pop(sealed), key=key)
                result[field] = json.loads(token.payload)
        return result


def member(gw, email, name=None, device="Laptop", tenant=None):
    data = {"method": "register", "email": email, "password": "correct horse battery",
            "device": {"name": device, "platform": "web"}}
    if name:
        data["name"] = name
    answer = gw.call(data, tenant=tenant)
    check(answer["status"] == "ok", f"register {email}: {answer}")
    return answer


def staff(gw, email, role, tenant=None):
    answer = member(gw, email)
    token = answer["session"]["access_token"]
    enrolled = gw.call({"method": "mfa_enroll", "access_token": token})
    check(enrolled["status"] == "ok", f"mfa_enroll: {enrolled}")
    totp = pyotp.parse_uri(enrolled["mfa"]["otpauth_uri"])
    verified = gw.call({"method": "mfa_verify", "access_token": token, "code": totp.now()})
    check(verified["status"] == "ok", f"mfa_verify: {verified}")
    # A role goes only to a proven address: first refused, then granted once this member has
    # proved their mailbox (what verify_email records; the mail round trip is EmailCodeFlowTests').
    refused = subprocess.run([BINARY, "admins", "grant", email, "--role", role], capture_output=True, text=True)
    check(refused.returncode == 1 and "never verified" in refused.stderr, f"admins grant, unproven: {refused}")
    proved = subprocess.run(
        ["psql", os.environ["AUTH_DATABASE_URL"], "-qtAc",
         "UPDATE identities SET email_verified = true WHERE provider = 'password' AND subject = lower('%s')"
         % email.replace("'", "''")], capture_output=True, text=True)
    check(proved.returncode == 0, f"psql: {proved.stderr}")
    granted = subprocess.run([BINARY, "admins", "grant", email, "--role", role]
                             + (["--tenant", tenant] if tenant else []), capture_output=True, text=True)
    check(granted.returncode == 0, f"admins grant: {granted.stderr}")
    return totp


def login(gw, email, device):
    return gw.call({"method": "password", "email": email, "password": "correct horse battery",
                    "device": {"name": device, "platform": "ios"}})


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("AUTH_CHROMIUM", "/usr/bin/chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,900", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    service = Service(executable_path=os.environ.get("AUTH_CHROMEDRIVER", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.implicitly_wait(5)
    return driver


def click(driver, element, arrived, what):
    """Clicks, then waits until the browser has arrived where `arrived(url)` says: a click
    returns before its navigation, and a check made at once reads the page being left."""
    element.click()
    try:
        WebDriverWait(driver, 10).until(lambda d: arrived(d.current_url))
    except Exception:
        check(False, f"{what}: the browser is at {driver.current_url}: {driver.page_source[:400]}")


def sign_in(driver, email, totp):
    driver.get(CONSOLE + "/admin/sign-in")
    driver.find_element(By.ID, "email").send_keys(email)
    driver.find_element(By.ID, "password").send_keys("correct horse battery")
    click(driver, driver.find_element(By.ID, "sign-in"), lambda url: url.endswith("/admin/sign-in/code"),
          "after the password")
    # The code of the step after the one the enrolment spent: accepted a step early, never twice.
    driver.find_element(By.ID, "code").send_keys(totp.at(time.time() + 30))
    click(driver, driver.find_element(By.ID, "verify"), lambda url: url.endswith("/admin/users"), "after the code")
    cookie = driver.get_cookie("__Host-console")
    check(cookie and cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict", f"cookie: {cookie}")
    return cookie["value"]


def open_user(driver, query):
    driver.get(CONSOLE + "/admin/users")
    box = driver.find_element(By.ID, "q")
    box.clear()
    box.send_keys(query)
    check(box.get_attribute("value") == query, f"typed {query!r}, the field holds {box.get_attribute('value')!r}")
    click(driver, driver.find_element(By.ID, "search"), lambda url: "q=" in url, "the search")
    return driver.find_elements(By.CSS_SELECTOR, "#users tbody a")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--screenshots")
    parser.add_argument("--schemathesis-examples", default="40")
    arguments = parser.parse_args()
    gw = Gateway()
    agent_totp = staff(gw, "agent@example.com", "support")
    admin_totp = staff(gw, "admin@example.com", "admin")
    acme_totp = staff(gw, "acme-agent@example.com", "support", tenant="acme")
    laptop = member(gw, "lena@example.com", name="Lena Park")
    # The same address in acme: another account, acme's agent's to help.
    acme_lena = member(gw, "lena@example.com", name="Lena Acme", tenant="acme")
    check(acme_lena["user"]["id"] != laptop["user"]["id"], "two tenants, two Lenas")
    phone = login(gw, "lena@example.com", "Lena's iPhone")
    check(phone["status"] == "ok", f"phone sign-in: {phone}")
    for index in range(3):
        member(gw, f"lena.{index}@example.org", name=f"Lena Example {index}")
    step("accounts", users=8)

    driver = browser()
    try:
        sign_in(driver, "agent@example.com", agent_totp)
        step("signed_in", role="support")
        links = open_user(driver, "lena")
        check(len(links) == 4, f"search for lena: {len(links)} rows")
        if arguments.screenshots:
            driver.save_screenshot(os.path.join(arguments.screenshots, "console-search.png"))
        target = [link for link in links if link.text.startswith("lena_park") or "Lena Park" in
                  link.find_element(By.XPATH, "../..").text]
        check(target, "Lena Park is in the results")
        click(driver, target[0], lambda url: "/admin/users/" in url and "?" not in url, "Lena's page")
        check(driver.find_elements(By.ID, "disable") == [], "support sees no disable button")
        rows = driver.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")
        phone_row = [row for row in rows if "Lena's iPhone" in row.text]
        check(len(phone_row) == 1, f"the phone's session is listed: {[row.text for row in rows]}")
        if arguments.screenshots:
            driver.save_screenshot(os.path.join(arguments.screenshots, "console-user.png"))
        click(driver, phone_row[0].find_element(By.TAG_NAME, "button"), lambda url: "done=session_ended" in url,
              "ending the phone's session")
        check("The session ended" in driver.find_element(By.ID, "notice").text, "the notice says so")
        refused = gw.call({"method": "refresh", "refresh_token": phone["session"]["refresh_token"]})
        check(refused["status"] == "error", f"the phone's refresh token: {refused}")
        kept = gw.call({"method": "refresh", "refresh_token": laptop["session"]["refresh_token"]})
        check(kept["status"] == "ok", f"the laptop's refresh token: {kept}")
        step("session_ended", refresh=refused["error"]["code"])
        click(driver, driver.find_element(By.ID, "sign-out"), lambda url: url.endswith("/admin/sign-in"), "signing out")

        # Acme's agent: acme's Lena only, whatever is typed or put in the address bar.
        sign_in(driver, "acme-agent@example.com", acme_totp)
        links = open_user(driver, "lena")
        check([link.get_attribute("href").rsplit("/", 1)[-1] for link in links] == [acme_lena["user"]["id"]],
              f"acme's search for lena: {[link.text for link in links]}")
        check("support @ acme" in driver.page_source, "the bar names the tenant served")
        driver.get(CONSOLE + "/admin/users/" + laptop["user"]["id"])
        check("Not found" in driver.page_source and "Lena Park" not in driver.page_source,
              "the default tenant's Lena by id is no user to acme's agent")
        driver.get(CONSOLE + "/admin/users?q=lena&tenant=default")
        check("Refused" in driver.page_source and "Lena Park" not in driver.page_source,
              "another tenant's search is refused")
        driver.get(CONSOLE + "/admin/users/" + acme_lena["user"]["id"])
        check(driver.find_element(By.ID, "tenant").text == "acme", "acme's Lena's page names her tenant")
        step("tenant_boundary", found=len(links))
        driver.get(CONSOLE + "/admin/users")
        click(driver, driver.find_element(By.ID, "sign-out"), lambda url: url.endswith("/admin/sign-in"), "signing out")

        sign_in(driver, "admin@example.com", admin_totp)
        click(driver, open_user(driver, "lena@example.com")[0], lambda url: "/admin/users/" in url and "?" not in url,
              "Lena's page")
        handle = driver.find_element(By.ID, "handle").text
        click(driver, driver.find_element(By.ID, "disable"), lambda url: "done=disabled" in url, "disabling")
        check("disabled" in driver.find_element(By.ID, "state").text, "the page shows it disabled")
        disabled = login(gw, "lena@example.com", "Lena's iPad")
        check(disabled.get("error", {}).get("code") == "account_disabled", f"disabled sign-in: {disabled}")
        click(driver, driver.find_element(By.ID, "enable"), lambda url: "done=enabled" in url, "enabling")
        enabled = login(gw, "lena@example.com", "Lena's iPad")
        check(enabled["status"] == "ok", f"enabled sign-in: {enabled}")
        step("disabled_and_enabled", refused=disabled["error"]["code"])
        driver.find_element(By.ID, "confirm").send_keys(handle)
        click(driver, driver.find_element(By.ID, "delete"), lambda url: "deleted=1" in url, "deleting")
        check(open_user(driver, "lena@example.com") == [], "deleted: no longer found")
        gone = login(gw, "lena@example.com", "Lena's iPad")
        check(gone.get("error", {}).get("code") == "invalid_credentials", f"deleted sign-in: {gone}")
        step("deleted")

        # The API against its OpenAPI document, as a signed-in admin.
        cookie = driver.get_cookie("__Host-console")["value"]
        request = urllib.request.Request(CONSOLE + "/admin/api/me", headers={"Cookie": f"__Host-console={cookie}"})
        token = json.loads(urllib.request.urlopen(request).read())["csrf_token"]
        # The session as the document's security scheme (so requests without it are known to
        # be unauthenticated); a refused deletion confirmation (422) is an answer to valid data.
        config = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"schemathesis-{uuid.uuid4()}.toml")
        with open(config, "w") as out:
            out.write(f'[auth.openapi.consoleSession]\napi_key = "{cookie}"\n\n'
                      '[checks.positive_data_acceptance]\n'
                      'expected-statuses = ["2xx", "401", "403", "404", "409", "422", "429"]\n')
        # Run from a scratch directory: schemathesis keeps a cache (`.schemathesis/`) in its working
        # directory, which does not belong in the project.
        scratch = tempfile.mkdtemp(prefix="schemathesis-")
        try:
            run = subprocess.run(
                [sys.executable, "-m", "schemathesis.cli", "--config-file", config, "run",
                 os.path.join(ROOT, "contract", "admin-api.yaml"), "--url", CONSOLE, "--checks", "all",
                 "--max-examples", arguments.schemathesis_examples, "--exclude-operation-id", "signOut",
                 "--header", f"X-CSRF-Token: {token}", "--seed", "1", "--no-color"],
                capture_output=True, text=True, timeout=600, cwd=scratch)
        finally:
            os.remove(config)
            shutil.rmtree(scratch, ignore_errors=True)
        output = run.stdout + run.stderr
        check(run.returncode == 0, "schemathesis: " + output[-6000:])
        step("schemathesis", summary=[line for line in output.splitlines() if "passed" in line or "cases" in line][-3:])
    finally:
        driver.quit()
        gw.close()


if __name__ == "__main__":
    main()
