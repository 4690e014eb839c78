/*
 * The experiment form, without page reloads:
 * - the policy pool formset: Add policy (a copy of the formset's empty form), Remove,
 *   Up and Down; TOTAL_FORMS and each kept form's ORDER follow what is on screen;
 * - regime and off-policy sections shown only for the chosen regime / method;
 * - the error summary: focused when the page comes back with errors, and each of its
 *   links focuses the field it names (opening a closed "Tokenizer and chat template");
 * - a preview: scrolled into view, its heading focused (a screen reader reads it).
 *
 * Removing a policy that the server rendered ticks its DELETE box and hides it (Django
 * then skips it); removing one added here drops it and renumbers the added ones so the
 * formset's indexes stay contiguous. Vanilla JS, no libraries.
 */
(function () {
  "use strict";

  var form = document.getElementById("experiment-form");
  if (!form) {
    return;
  }
  form.classList.add("js");

  var prefix = form.getAttribute("data-pool-prefix") || "pool";
  var list = document.getElementById("pool-forms");
  var template = document.getElementById("policy-template");
  var addButton = form.querySelector('[data-action="add-policy"]');
  var countLabel = form.querySelector('[data-role="pool-count"]');

  function management(name) {
    return form.querySelector('input[name="' + prefix + "-" + name + '"]');
  }

  var total = management("TOTAL_FORMS");
  var initialForms = parseInt(management("INITIAL_FORMS").value, 10) || 0;
  var minForms = parseInt(management("MIN_NUM_FORMS").value, 10) || 1;
  var maxForms = parseInt(management("MAX_NUM_FORMS").value, 10) || 8;

  function cards() {
    return Array.prototype.filter.call(list.children, function (element) {
      return element.matches("fieldset.policy");
    });
  }

  function keptCards() {
    return cards().filter(function (card) {
      return !card.hidden;
    });
  }

  function indexOf(card) {
    return parseInt(card.getAttribute("data-index"), 10);
  }

  function role(card, name) {
    return card.querySelector('[data-role="' + name + '"]');
  }

  function action(card, name) {
    return card.querySelector('[data-action="' + name + '"]');
  }

  /* ORDER = position on screen (1-based), buttons enabled where they make sense. */
  function renumber() {
    var kept = keptCards();
    kept.forEach(function (card, position) {
      role(card, "order").value = String(position + 1);
      role(card, "policy-number").textContent = String(position + 1);
      action(card, "move-up").disabled = position === 0;
      action(card, "move-down").disabled = position === kept.length - 1;
      action(card, "remove-policy").disabled = kept.length <= minForms;
    });
    addButton.disabled = kept.length >= maxForms;
    if (countLabel) {
      countLabel.textContent = kept.length + " of at most " + maxForms + " policies.";
    }
  }

  /* Point every prefixed attribute of a card at formset index `next`. */
  function setIndex(card, next) {
    var old = prefix + "-" + indexOf(card) + "-";
    var now = prefix + "-" + next + "-";
    var attributes = ["name", "id", "for", "data-testid", "aria-describedby", "data-field"];
    var elements = [card].concat(Array.prototype.slice.call(card.querySelectorAll("*")));
    elements.forEach(function (element) {
      attributes.forEach(function (attribute) {
        var value = element.getAttribute(attribute);
        if (value && value.indexOf(old) !== -1) {
          element.setAttribute(attribute, value.split(old).join(now));
        }
      });
    });
    card.setAttribute("data-index", String(next));
  }

  function reindexAdded() {
    var added = cards()
      .filter(function (card) {
        return indexOf(card) >= initialForms;
      })
      .sort(function (a, b) {
        return indexOf(a) - indexOf(b);
      });
    added.forEach(function (card, offset) {
      if (indexOf(card) !== initialForms + offset) {
        setIndex(card, initialForms + offset);
      }
    });
    total.value = String(initialForms + added.length);
  }

  function addPolicy() {
    if (keptCards().length >= maxForms) {
      return;
    }
    var index = parseInt(total.value, 10);
    var holder = document.createElement("div");
    holder.innerHTML = template.innerHTML.split("__prefix__").join(String(index)).trim();
    var card = holder.firstElementChild;
    list.appendChild(card);
    total.value = String(index + 1);
    renumber();
    var name = card.querySelector('input[name="' + prefix + "-" + index + '-name"]');
    if (name) {
      name.focus();
    }
  }

  function removePolicy(card) {
    if (keptCards().length <= minForms) {
      return;
    }
    if (indexOf(card) < initialForms) {
      role(card, "delete").checked = true;
      card.hidden = true;
    } else {
      card.parentNode.removeChild(card);
      reindexAdded();
    }
    renumber();
  }

  function movePolicy(card, step) {
    var kept = keptCards();
    var position = kept.indexOf(card);
    var target = kept[position + step];
    if (!target) {
      return;
    }
    if (step < 0) {
      list.insertBefore(card, target);
    } else {
      list.insertBefore(target, card);
    }
    renumber();
    var button = action(card, step < 0 ? "move-up" : "move-down");
    (button.disabled ? action(card, step < 0 ? "move-down" : "move-up") : button).focus();
  }

  /* After a preview the server renders forms in index order: restore the chosen order. */
  function sortByOrder() {
    var kept = keptCards();
    var keyed = kept.map(function (card, position) {
      var value = parseInt(role(card, "order").value, 10);
      return { card: card, key: isNaN(value) ? Infinity : value, position: position };
    });
    keyed.sort(function (a, b) {
      return a.key - b.key || a.position - b.position;
    });
    keyed.forEach(function (item) {
      list.appendChild(item.card);
    });
    cards()
      .filter(function (card) {
        return card.hidden;
      })
      .forEach(function (card) {
        list.appendChild(card);
      });
  }

  list.addEventListener("click", function (event) {
    var button = event.target.closest("[data-action]");
    if (!button || !list.contains(button)) {
      return;
    }
    var card = button.closest("fieldset.policy");
    var name = button.getAttribute("data-action");
    if (name === "remove-policy") {
      removePolicy(card);
    } else if (name === "move-up") {
      movePolicy(card, -1);
    } else if (name === "move-down") {
      movePolicy(card, 1);
    }
  });
  addButton.addEventListener("click", addPolicy);

  /* Sections that belong to one regime (or one off-policy method). */
  function toggleSections() {
    form.querySelectorAll("[data-switch]").forEach(function (element) {
      var select = form.querySelector('[name="' + element.getAttribute("data-switch") + '"]');
      element.hidden = !select || select.value !== element.getAttribute("data-show-when");
    });
  }

  ["regime", "off_policy"].forEach(function (name) {
    var select = form.querySelector('[name="' + name + '"]');
    if (select) {
      select.addEventListener("change", toggleSections);
    }
  });

  /* Focus what an error-summary link names; the label stays in view above it. */
  function focusTarget(id) {
    var target = document.getElementById(id);
    if (!target) {
      return false;
    }
    var closed = target.closest("details:not([open])");
    if (closed) {
      closed.open = true;
    }
    var field = target.closest(".field");
    (field || target).scrollIntoView({ block: "center" });
    target.focus({ preventScroll: true });
    return true;
  }

  var summary = form.querySelector('[data-testid="error-summary"]');
  if (summary) {
    summary.addEventListener("click", function (event) {
      var link = event.target.closest("a[data-target]");
      if (link && focusTarget(link.getAttribute("data-target"))) {
        event.preventDefault();
        history.replaceState(null, "", "#" + link.getAttribute("data-target"));
      }
    });
  }

  sortByOrder();
  renumber();
  toggleSections();

  var previewTitle = document.getElementById("preview-title");
  if (summary) {
    summary.scrollIntoView({ block: "start" });
    summary.focus({ preventScroll: true });
  } else if (previewTitle) {
    document.getElementById("preview").scrollIntoView({ block: "start" });
    previewTitle.focus({ preventScroll: true });
  }
})();
